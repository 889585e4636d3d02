/**
 * The answer model: one account of what an upstream answer produced, whatever its wire format
 * (OpenAI chat, completions or Responses, Anthropic Messages, Gemini; plain or streamed). Each
 * wire format has one reader that fills it (src/upstream/answers/); a translated answer is read
 * by the reader of the format the upstream spoke, never from its translation, so a translation
 * bills exactly what the same answer read natively bills. The settle rule (settle.ts) alone
 * turns an account into what is billed.
 */
import type { OutputCount } from './output.js';
import type { Usage } from './usage.js';

export interface AnswerAccount {
  /** The upstream's last usage report, once one with valid counts came; null otherwise. */
  usage: Usage | null;
  /** Every kind of output produced so far (see output.ts). */
  output(): OutputCount;
  /** Calls of priced hosted tools the upstream reported (`{web_search: 2}`), or null for none. */
  tools?(): Record<string, number> | null;
  /**
   * True when output came after the last usage report: that report did not count it, so it is
   * not final even at the answer's end (an opening report, or a running total sent early).
   * Absent: a reader whose usage comes only at the end.
   */
  outputAfterUsage?(): boolean;
  /**
   * True once the answer's content ended (a finish or stop reason) while its usage may still
   * follow: a client that leaves now still pays that usage. Absent: a reader that does not tell.
   */
  answered?(): boolean;
}

/** A plain answer's account: usage and output read from the whole body at once. */
export function plainAccount(usage: Usage | null, output: () => OutputCount, tools?: Record<string, number> | null): AnswerAccount {
  return { usage, output, tools: () => tools ?? null, outputAfterUsage: () => false };
}
