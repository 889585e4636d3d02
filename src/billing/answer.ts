/**
 * The answer model: one account of what an upstream answer produced, whatever its wire format
 * (OpenAI chat, completions or Responses, Anthropic Messages, Gemini; plain or streamed). Each
 * wire format has one reader that fills it (src/upstream/answers/); a translated answer is read
 * by the reader of the format the upstream spoke, never from its translation, so a translation
 * bills exactly what the same answer read natively bills. The settle rule (settle.ts) alone
 * turns an account into what is billed.
 */
import { isNoOutput, type OutputCount } from './output.js';
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
   * Output the last usage report is known to leave out while it counts the rest (Gemini's
   * report without `candidatesTokenCount` counts only the thinking, not the visible output):
   * billed on top of the report, counted. Absent or empty: the report counts all it covers.
   */
  unreported?(): OutputCount;
  /**
   * True when the upstream's own answer says it failed (a Responses answer whose status is
   * `failed`, its terminal `response.failed`): billed as an answer the upstream cut, what it
   * produced and no more; with nothing produced, its hold is released.
   */
  failed?(): boolean;
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

/**
 * `account` with the priced hosted tool calls `tools` says: everything else is the account's
 * own, read through (a copy of some fields would lose what the others say of the report).
 */
export function withTools(account: AnswerAccount, tools: () => Record<string, number> | null): AnswerAccount {
  const out: AnswerAccount = {
    get usage() {
      return account.usage;
    },
    output: () => account.output(),
    tools,
    outputAfterUsage: () => account.outputAfterUsage?.() === true,
    unreported: () => account.unreported?.() ?? { text: '', mediaBytes: 0 },
    failed: () => account.failed?.() === true,
  };
  if (account.answered) out.answered = () => account.answered!();
  return out;
}

/**
 * The usage of an answer whose report accounts for all of it (a whole answer's final report:
 * no output after it, none it leaves out, not a failure), else null: what the response cache
 * keeps and bills its hits by.
 */
export function finalUsage(account: AnswerAccount): Usage | null {
  const { usage } = account;
  const u = account.unreported?.();
  if (!usage || account.outputAfterUsage?.() || account.failed?.() || (u && !isNoOutput(u))) return null;
  // As the settle rule reads a report: no prompt tokens, or none written beside output, is no count.
  if (usage.prompt === 0) return null;
  if (usage.completion === 0) {
    if (!isNoOutput(account.output())) return null;
  }
  return usage;
}
