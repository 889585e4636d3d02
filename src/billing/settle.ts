/**
 * The settle rule: what a billed call is charged, decided here and nowhere else, for text,
 * images, speech and video alike. Operations describe what happened (an answer's account, the
 * images returned, the seconds rendered); these functions turn it into units and how they
 * were measured, and bill or release the call once.
 */
import type { AnswerAccount } from './answer.js';
import type { BilledCall } from './meter.js';
import { isNoOutput, outputTokens } from './output.js';
import type { Tokenizer } from './tokens.js';

/** How a token-priced answer ended, and what its bill needs beside its account. */
export interface AnswerEnd {
  /**
   * The answer reached its end marker (`[DONE]`, `response.completed`, `message_stop`, a whole
   * plain body): a usage report that came after all its output is then final.
   */
  complete: boolean;
  /**
   * Why an incomplete answer ended: `upstream` (the upstream failed, cut its body or sent
   * garbage) or `stopped` (the client left, or shutdown cut it). Ignored when complete.
   */
  cause?: 'upstream' | 'stopped';
  /** The upstream that served the call. */
  upstream: string;
  /** The prompt's tokens counted with the tokenizer, for an answer whose usage never came. */
  promptTokens(): number;
  tokenizer: Tokenizer;
}

/**
 * Bills a token-priced answer once.
 *
 * - Usage is final only at the end of a complete answer, when no output came after it and it
 *   accounts for the output there was (a report of zero output tokens after output is an
 *   opening report, not an account of it): then it is billed as reported.
 * - Otherwise (cut, failed, or complete with a report that was not final) the bill is the
 *   larger of the usage seen and the count of what was produced: produced output is never
 *   billed as zero, and a reader that could not read a count falls back to counting.
 * - Once the upstream answered 200, the prompt is billed even when nothing was produced (the
 *   provider read it, and may have cached it): from its usage when it came, else the count.
 *   Only an upstream that failed before producing anything is not paid: its hold is released.
 * - A report of zero prompt tokens for a prompt is not final either: the prompt is counted.
 * - A report known to leave part of the output out (Gemini's count of the thinking alone) is
 *   billed what it counts plus the count of the output it left out.
 * - An answer the upstream says failed (Responses' `response.failed`) is one it cut.
 */
export function settleAnswer(call: BilledCall, account: AnswerAccount, given: AnswerEnd): Promise<void> {
  const { usage } = account;
  // An answer the upstream itself says failed ended as one it cut, whatever its end marker.
  const end: AnswerEnd = account.failed?.() ? { ...given, complete: false, cause: 'upstream' } : given;
  // Hosted tool calls are billed per call beside the tokens, however the tokens are measured.
  const tools = account.tools?.() ?? null;
  const toolCalls = tools ? { tools } : {};
  const upstream = { upstream: end.upstream };
  // Counted only when needed: a final report with output in it is billed without reading the output.
  let counted: number | undefined;
  const produced = () => (counted ??= outputTokens(account.output(), (t) => end.tokenizer.count(t)));
  // A report of no prompt tokens for a request that had a prompt is no count (every provider
  // bills its input, cached or not): the prompt is counted instead, whatever the upstream kind.
  const promptless = usage !== null && usage.prompt === 0 && end.promptTokens() > 0;
  // A report that leaves part of the output out (it counts only the thinking) is billed what
  // it counts plus the count of the rest: the two cover different output, so neither bounds
  // it. Never less than the count of all that was produced (a running report sent before
  // most of a cut stream counts little of it).
  const unreported = usage && !promptless ? account.unreported?.() : undefined;
  if (usage && unreported && !isNoOutput(unreported)) {
    const completion = Math.max(usage.completion + outputTokens(unreported, (t) => end.tokenizer.count(t)), produced());
    return call.bill({ kind: 'tokens', ...usage, completion, ...toolCalls }, 'tokenizer', upstream);
  }
  if (usage && !promptless && end.complete && !account.outputAfterUsage?.() && (usage.completion > 0 || produced() === 0)) {
    return call.bill({ kind: 'tokens', ...usage, ...toolCalls }, 'usage', upstream);
  }
  const completion = Math.max(usage?.completion ?? 0, produced());
  if (completion === 0 && !tools && !end.complete && end.cause === 'upstream') return call.cancel();
  // The prompt is the provider's to count whenever it said (it does not grow mid-answer); its
  // cache reads and writes stay parts of it, priced as such.
  const prompt = usage && !promptless ? usage.prompt : end.promptTokens();
  return call.bill({ kind: 'tokens', ...usage, prompt, completion, ...toolCalls }, 'tokenizer', upstream);
}

/** Releases a call whose upstream produced nothing (refused, unreachable, or failed before its answer). */
export function releaseCall(call: BilledCall): Promise<void> {
  return call.cancel();
}

/**
 * Bills one check of a moderation guardrail at the price it was held at: the check was made
 * (its upstream answered), whatever it decided.
 */
export function settleGuardrailCheck(call: BilledCall, guardrail: string, unitPricePico: bigint, upstream: string): Promise<void> {
  return call.bill({ kind: 'guardrail', id: guardrail, checks: 1 }, 'usage', { unitPricePico, upstream });
}

/** Where a media answer's charge is written, and at what price it was held. */
export interface MediaSettle {
  upstream?: string | undefined;
  /** The ledger entry's id when it is not the hold id (an image answered as a job). */
  entryId?: string;
  /** The per-unit price (pico-USD) the call was held at: a job is billed at its held price. */
  unitPricePico?: bigint;
}

/**
 * Bills an image generation by the images the upstream returned, every one of them (an
 * upstream that returned more than asked delivered more, and each is relayed), at the tier
 * held. An answer that does not list its images is billed the number asked for. A failed
 * generation is released.
 */
export function settleImages(call: BilledCall, returned: number | null, asked: number, tier: string, where: MediaSettle): Promise<void> {
  if (returned === 0) return call.cancel();
  const images = returned ?? asked;
  return call.bill({ kind: 'images', images, tier }, returned === null ? 'estimate' : 'usage', where);
}

/** Bills speech by its input's tokens once any audio went out; released when none did. */
export function settleSpeech(call: BilledCall, tokens: number, produced: boolean, where: MediaSettle): Promise<void> {
  return produced ? call.bill({ kind: 'speech_tokens', tokens }, 'tokenizer', where) : call.cancel();
}

/**
 * Bills a finished video by the seconds the upstream reported (else the seconds asked for),
 * at the tier and price it was held at. Null seconds with nothing rendered releases it.
 */
export function settleVideo(call: BilledCall, reported: number | null, asked: number, tier: string, where: MediaSettle): Promise<void> {
  const seconds = reported ?? asked;
  return call.bill({ kind: 'seconds', seconds, tier }, reported === null ? 'estimate' : 'usage', where);
}
