/**
 * The billed call a stream settles, and how it hands its end to the one settle rule
 * (billing/settle.ts): the account of what the upstream produced (its own reader's, or the
 * stream's reader's when the upstream spoke the client's API) and how the stream ended.
 */
import type { AnswerAccount } from '../../billing/answer.js';
import type { BilledCall } from '../../billing/meter.js';
import { settleAnswer } from '../../billing/settle.js';
import type { Tokenizer } from '../../billing/tokens.js';
import type { Model } from '../../catalog/catalog.js';
import type { Logger } from '../../observability/log.js';
import type { Hooks } from '../../pipeline/hooks.js';
import type { Breaker } from '../breaker.js';
import type { EventReader } from './reader.js';

/** What the one stream relay uses of the gateway: no more. */
export interface RelayDeps {
  cfg: {
    limits: { streamKeepAliveMs: number };
    usageGraceMs: number;
    /** The upstreams, for the redaction of their keys from an error relayed to the client. */
    upstreams: Readonly<Record<string, unknown>>;
  };
  /** Streams open now (a gauge). */
  counters: { openStreams: number };
  tokenizer: Tokenizer;
  log: Pick<Logger, 'warn'>;
  hooks: Pick<Hooks, 'has' | 'run'>;
  breaker: Pick<Breaker, 'failure'>;
}

export interface StreamCall {
  call: BilledCall;
  /** The model as served (its upstream is the one that answered). */
  model: Model;
  promptTokens(): number;
  /**
   * The account of a translated answer, read in the upstream's own format as it arrived:
   * billed instead of what the client's format says, so a translation bills what the same
   * answer read natively bills. Absent: the stream's reader reads the upstream's format.
   */
  account?: AnswerAccount;
  /**
   * Called once a complete answer is settled, before its last frames go out (the response
   * cache stores it then, so the next identical request finds it). Never throws.
   */
  complete?(): Promise<void>;
}

/** Bills the stream once: `stopped` when the client or shutdown ended it, `upstream` when the upstream failed. */
export function settleStream(billing: StreamCall, reader: EventReader, tokenizer: Tokenizer, cause: 'upstream' | 'stopped'): Promise<void> {
  return settleAnswer(billing.call, billing.account ?? reader.produced(), {
    complete: reader.done,
    cause,
    upstream: billing.model.upstream,
    promptTokens: billing.promptTokens,
    tokenizer,
  });
}
