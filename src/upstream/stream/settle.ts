/**
 * How a stream is billed, once, whatever way it ended: the upstream's usage when it came and
 * is final, else the produced output counted with the tokenizer, else (nothing produced) the
 * hold is released.
 */
import type { BilledCall } from '../../billing/meter.js';
import { outputTokens } from '../../billing/output.js';
import type { Tokenizer } from '../../billing/tokens.js';
import type { Model } from '../../catalog/catalog.js';
import type { EventReader } from './reader.js';

/** The billed call a stream settles, and how to count a prompt whose usage never came. */
export interface StreamCall {
  call: BilledCall;
  /** The model as served (its upstream is the one that answered). */
  model: Model;
  promptTokens(): number;
}

/**
 * Bills what the stream produced, once. Usage is final only at the end of a complete stream,
 * when no output came after it and it accounts for the output there was (a report of zero
 * completion tokens after output is an opening report, not an account of it): then it is
 * billed as reported. Any other stream (cut, failed, or complete with a report that was not
 * final) bills the larger of the usage seen and the count of what was produced: produced
 * output is never billed as zero. Nothing produced and no usage releases the hold.
 */
export function settleStream(billing: StreamCall, reader: EventReader, tokenizer: Tokenizer): Promise<void> {
  const { call, model } = billing;
  const { usage, output, tools: toolsOf, outputAfterUsage } = reader.produced();
  // Hosted tool calls are billed per call beside the tokens, however the tokens are measured.
  const tools = toolsOf?.() ?? null;
  const toolCalls = tools ? { tools } : {};
  // Counted only when needed: a final report with output in it is billed without parsing the stream.
  let counted: number | undefined;
  const producedTokens = () => (counted ??= outputTokens(output(), (t) => tokenizer.count(t)));
  if (usage && reader.done && !outputAfterUsage?.() && (usage.completion > 0 || producedTokens() === 0)) {
    return call.bill({ kind: 'tokens', ...usage, ...toolCalls }, 'usage', { upstream: model.upstream });
  }
  const completion = producedTokens();
  if (completion === 0 && !usage?.completion && !tools) return call.cancel();
  // The prompt is the provider's to count whenever it said (it does not grow mid-stream).
  const prompt = usage?.prompt ?? billing.promptTokens();
  // The usage's cache reads and writes stay parts of its prompt, priced as such.
  return call.bill({ kind: 'tokens', ...usage, prompt, completion: Math.max(usage?.completion ?? 0, completion), ...toolCalls }, 'tokenizer', {
    upstream: model.upstream,
  });
}
