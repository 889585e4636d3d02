/**
 * An operation is one endpoint, declared: its method and path (after /v1), whether it is a
 * billable POST (it honours Idempotency-Key, and its key-rate check rides on its hold), and
 * what it does. Token-priced endpoints are declared as `TextOperation`s over one generic
 * billed call (text.ts); media endpoints declare their own relay (bytes, or a job).
 */
import type { OutputCount } from '../billing/output.js';
import type { Usage } from '../billing/usage.js';
import type { TokenHold } from '../billing/billed-call.js';
import type { Model } from '../catalog/catalog.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import type { EventReader } from '../upstream/stream/reader.js';
import type { CacheFormat } from '../cache/format.js';

export interface Operation {
  method: 'GET' | 'POST' | 'DELETE';
  /** The path after /v1, with `{name}` (one segment) or `{name...}` (the rest) parameters. */
  path: string;
  /** A billable POST: Idempotency-Key is honoured, and the key's rate check rides on the hold. */
  idempotent?: boolean;
  run(core: Services, ctx: RequestContext): Promise<Response>;
}

/** What a token-priced call is, once its request was read: everything the billed call needs. */
export interface TextPlan {
  /** The model the client called. */
  model: Model;
  /** The worst case to hold. */
  hold: TokenHold;
  stream: boolean;
  /** The prompt's tokens counted with the tokenizer, for an answer that reports no usage. */
  promptTokens(): number;
  /** The fields to send to `served` (a target of the model: its `upstreamModel` in `model`). */
  fields(served: Model): Record<string, unknown>;
  /**
   * The worst case of `fields` when a plugin replaced the body before it went upstream: the
   * hold is computed on what the upstream receives.
   */
  holdFor(fields: Record<string, unknown>): TokenHold;
  /**
   * Whether the client's own bytes may go upstream as they came (but for `leading`, the held
   * cap, and the model's upstream name in place of the client's).
   */
  unchanged: boolean;
  /**
   * Members (`"name":value,` each, a comma after each) the gateway adds ahead of the client's
   * own fields when its bytes go as they came; the client's body has none of them.
   */
  leading?: string;
  /**
   * The output cap the upstream is asked for whenever the body it receives names none (the
   * client sent none, or a plugin removed it): the upstream is never asked for more output than
   * was held. Absent: the endpoint produces no output (embeddings).
   */
  cap?: OutputCap;
  /** The reader of the streamed answer's events. */
  events(served: Model, apiKey: string): EventReader;
  /**
   * The readers of the answer to `fields`, when a plugin or a guardrail replaced the body before
   * it went upstream and the answer is read against what was sent (completions' echo is the
   * prompt sent, not the client's). Absent: the readers do not depend on the body.
   */
  readsFor?(fields: Record<string, unknown>): Pick<TextPlan, 'events' | 'answer'>;
  /**
   * Reads a plain answer: what it reports and produced (and the priced hosted tool calls it
   * reports, billed per call); throws when it is not this endpoint's answer. `remember` is
   * what the gateway must keep of the answer before the client has it (who owns its id).
   */
  answer(body: Record<string, unknown>): {
    usage: Usage | null;
    output(): OutputCount;
    tools?: Record<string, number> | null;
    remember?: () => Promise<void>;
    /** The answer says it failed (see AnswerAccount.failed). */
    failed?: boolean;
  };
}

export interface OutputCap {
  /** The upstream's field for it. */
  field: string;
  /** The per-choice most the hold allows. */
  tokens: number;
  /** The fields that cap the output when a body names them. */
  names: readonly string[];
  /** The client's body names a cap already (its bytes may go as they came). */
  sent: boolean;
}

/** A token-priced endpoint: it reads its request into a plan; the billed call does the rest. */
export interface TextOperation {
  /** The path after /v1, which is also the upstream's path. */
  path: string;
  plan(core: Services, ctx: RequestContext, body: Record<string, unknown>): Promise<TextPlan>;
  /** How its answers are kept in and replayed from the response cache; absent: never cached. */
  cache?: CacheFormat;
}
