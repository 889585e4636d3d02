/**
 * Calling an upstream through its circuit breaker (open: 503 model_unavailable with Retry-After),
 * and turning its failures into the gateway's errors (502 upstream_error, 504 upstream_timeout).
 */
import type { Model, Target } from '../catalog/catalog.js';
import type { GatewayConfig } from '../options.js';
import type { Breaker } from './breaker.js';
import { GatewayError } from '../errors.js';
import { type Upstream, upstreamFailure, type UpstreamCall, type UpstreamResponse } from './client.js';
import { SpanStatusCode } from '@opentelemetry/api';
import type { Logger } from '../observability/log.js';
import { failureCause } from '../observability/logs.js';
import { upstreamKeysRedactor } from './key-redactor.js';
import { redactErrorOf, upstreamError } from './answer-errors.js';
import type { CallRecord } from '../observability/record.js';
import { startUpstreamSpan } from '../observability/traces.js';

/** What calling a model uses of the gateway: its upstreams, their breaker, routing, the clock, a logger. */
export interface CallDeps {
  cfg: Pick<GatewayConfig, 'routing' | 'upstreams'>;
  upstreams: ReadonlyMap<string, Upstream>;
  breaker: Breaker;
  now: () => number;
  log: Logger;
}

/** Request headers sent upstream: built from scratch, never copied from the client. */
export function upstreamHeaders(requestId: string, contentType = 'application/json'): Record<string, string> {
  return { 'content-type': contentType, accept: '*/*', 'x-request-id': requestId };
}

/** Transport failures that happen before a request was sent: no request's content can cause them. */
const CONNECTION_CAUSES = new Set(['connect_refused', 'dns', 'tls']);

function isConnectionFailure(err: unknown): boolean {
  const cause = failureCause(err);
  if (CONNECTION_CAUSES.has(cause)) return true;
  // A connect timeout too (a headers or body timeout is not: the request was sent).
  for (let e: unknown = err, i = 0; e && typeof e === 'object' && i < 5; e = (e as { cause?: unknown }).cause, i++) {
    if ((e as { code?: unknown }).code === 'UND_ERR_CONNECT_TIMEOUT') return true;
  }
  return false;
}

/**
 * Calls an upstream through its circuit breaker. With the request's `record`, the wait for
 * the answer's headers is timed, the call is a child span whose trace context travels
 * upstream, and a transport failure is logged with its cause (DNS, connect refused, TLS,
 * timeout, reset).
 */
export async function callUpstream(
  core: CallDeps,
  upstreamName: string,
  call: UpstreamCall,
  record?: CallRecord,
  /** The account whose request this is (breaker fairness); null for the gateway's own calls. */
  account: string | null = null,
  /**
   * The circuit the call counts in: the upstream's own (its models' calls) unless a caller of
   * another kind keeps its own, so neither's failures or successes decide the other's.
   */
  circuit: string = upstreamName,
): Promise<UpstreamResponse> {
  const upstream = core.upstreams.get(upstreamName);
  if (!upstream) throw new GatewayError('internal_error', `No upstream named ${upstreamName}.`);
  const admitted = core.breaker.admit(circuit);
  if (!admitted.ok) {
    throw new GatewayError('model_unavailable', 'The model is temporarily unavailable. Try again later.', {
      headers: { 'retry-after': String(admitted.retryAfterS) },
    });
  }
  // No request span: no tracer provider is registered, so no upstream span either.
  const span = record?.span ? startUpstreamSpan(record.span, upstreamName, call.path, call.headers) : null;
  const started = performance.now();
  let res: UpstreamResponse;
  try {
    res = await upstream.call(call);
  } catch (err) {
    if (record) record.upstreamMs += performance.now() - started;
    span?.setStatus({ code: SpanStatusCode.ERROR, message: failureCause(err) });
    span?.end();
    if (call.signal?.aborted) {
      // A probe whose client left taught nothing, but it must end: it counts as failed, so the
      // circuit opens for another cooldown and the next call probes again.
      if (admitted.probe !== null) core.breaker.failure(circuit, account, admitted.probe);
      throw err;
    }
    core.breaker.failure(circuit, isConnectionFailure(err) ? null : account, admitted.probe);
    throw transportFailure(core, upstreamName, call, err);
  }
  if (record) record.upstreamMs += performance.now() - started;
  span?.setAttribute('http.response.status_code', res.status);
  if (res.status >= 500) span?.setStatus({ code: SpanStatusCode.ERROR });
  span?.end();
  // A redirect (not followed) is the upstream misconfigured or moved: a failure, as a 5xx is.
  if (res.status >= 500 || (res.status >= 300 && res.status < 400)) core.breaker.failure(circuit, account, admitted.probe);
  else core.breaker.success(circuit, admitted.probe);
  if (res.status >= 300) redactErrorOf(res, upstreamKeysRedactor(core.cfg));
  return res;
}

/** A transport failure (no answer, or a body that failed after its 200), logged with its cause: the client's error for it. */
function transportFailure(core: CallDeps, upstreamName: string, call: UpstreamCall, err: unknown): GatewayError {
  core.log.warn({
    msg: 'upstream failure',
    request_id: call.headers['x-request-id'],
    upstream: upstreamName,
    path: call.path,
    cause: failureCause(err),
    error: err instanceof Error ? err.message : String(err),
  });
  return upstreamFailure(err, upstreamName);
}

/** What a route tells callModel about its request. */
export interface ModelCallContext {
  requestId: string;
  key: { accountId: string };
  observed: { record: CallRecord };
}

/** The answer of callModel, and the model as served: `upstream` / `upstreamModel` are the serving target's. */
export interface ModelAnswer {
  res: UpstreamResponse;
  served: Model;
}

/**
 * The order in which a call tries a model's targets: by priority, lowest first; within one
 * priority a weighted random order (each next target drawn with probability weight / the
 * weights left). `random` returns [0, 1).
 */
export function orderTargets(targets: readonly Target[], random: () => number = Math.random): Target[] {
  const out: Target[] = [];
  let i = 0;
  while (i < targets.length) {
    let j = i;
    while (j < targets.length && targets[j]!.priority === targets[i]!.priority) j++;
    const group = targets.slice(i, j);
    while (group.length) {
      const total = group.reduce((sum, t) => sum + t.weight, 0);
      let r = random() * total;
      let k = 0;
      while (k < group.length - 1 && r >= group[k]!.weight) r -= group[k++]!.weight;
      out.push(group.splice(k, 1)[0]!);
    }
    i = j;
  }
  return out;
}

/** An upstream answer worth another attempt: 5xx (the upstream failed) or 429 (it is busy). */
const retryable = (status: number) => status >= 500 || status === 429;

/** Retry-After of a 429 in ms (seconds or an HTTP date), null when absent or unreadable. */
function retryAfterMs(res: UpstreamResponse, now: number): number | null {
  const h = res.header('retry-after-ms') ?? null;
  if (h && /^\d+(\.\d+)?$/.test(h)) return Number(h);
  const v = res.header('retry-after');
  if (!v) return null;
  if (/^\d+(\.\d+)?$/.test(v.trim())) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

const pause = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/** A failed attempt's answer that another attempt replaced: logged with the upstream's words, its body read to the end. */
function dropAnswer(core: CallDeps, ctx: ModelCallContext, answer: ModelAnswer): void {
  void upstreamError(answer.res, answer.served.upstream, { log: core.log, requestId: ctx.requestId }).catch(() => undefined);
}

/** Whether `served` is the model's own target (not a fallback): the upstream and model it names. */
export const sameTarget = (served: Model, model: Model) => served.upstream === model.upstream && served.upstreamModel === model.upstreamModel;

/**
 * Calls a model: its targets in orderTargets' order, each through its circuit breaker, with
 * retries. An attempt is retried after a connection failure, a timeout, an upstream 5xx or 429,
 * on the next target (the model's targets are cycled through when the budget allows more
 * attempts than there are targets). Everything happens before the answer is handed back, so
 * nothing has reached the client yet: once it has, nothing is retried. Limits: at most
 * `routing.retries` extra attempts; no attempt starts once `routing.deadlineMs` has passed
 * since the first; between attempts a jittered exponential backoff, or a 429's Retry-After
 * when it is no longer than `routing.maxRetryAfterMs` (a longer one is not waited out: the
 * next target is tried, or the 429 is relayed when there is none, and that upstream is not
 * tried again by the call). A target whose circuit is
 * open is skipped; when every one is, 503 model_unavailable. The last failure is what the
 * caller gets: a thrown error, or the failing answer (the route turns it into its error).
 * `build` makes the request for one target (its `upstreamModel` goes in the body's `model`).
 *
 * `once`: a submission the upstream may have acted on is not sent again (a job it accepted
 * before a timeout, a 5xx or a reset would be created twice, the second run for nobody): only
 * a connection that failed before the request was sent, or a 429 (refused), is retried.
 *
 * `whole`: a plain answer is read to its end inside its attempt, so a body that fails after
 * the 200 (a reset, a stall past the timeout) counts against its upstream's circuit and is
 * retried like any failure: nothing of it has reached the client. The answer handed back then
 * holds its text.
 *
 * `begin`: a streamed answer's first read, taken inside its attempt (speech's first audio): an
 * upstream that fails or ends before it counts against its circuit and is retried on the next
 * target, as a whole answer's would be; nothing has reached the client yet.
 */
export async function callModel(
  core: CallDeps,
  ctx: ModelCallContext,
  model: Model,
  build: (served: Model) => UpstreamCall | Promise<UpstreamCall>,
  options: { once?: boolean; whole?: boolean; begin?: (res: UpstreamResponse) => Promise<void> } = {},
): Promise<ModelAnswer> {
  const routing = core.cfg.routing;
  const started = core.now();
  const order = orderTargets(model.targets);
  const attempts = routing.retries + 1;
  const built = new Map<string, UpstreamCall>();
  let lastError: unknown = null;
  let lastAnswer: { res: UpstreamResponse; served: Model } | null = null;
  let unavailable: GatewayError | null = null;
  // Targets that cannot take this request (a feature their kind cannot carry, a body their
  // plugins changed past what was held): another target may; when none can, the first refusal.
  let refused: GatewayError | null = null;
  const cannot = new Set<string>();
  let signal: AbortSignal | undefined;
  let tried = 0;
  // Upstreams that answered 429 with a Retry-After longer than this call waits: asked to be
  // left alone, they are not tried again when the attempts cycle back to them.
  let resting: Set<string> | null = null;
  for (let n = 0; tried < attempts; n++) {
    // Every target was skipped (open circuits) in a full round: nothing can serve the call.
    if (n >= order.length && tried === 0) break;
    if (n >= order.length * attempts) break;
    const target = order[n % order.length]!;
    if (resting?.has(target.upstream)) continue;
    if (tried > 0 && core.now() - started >= routing.deadlineMs) break;
    const served: Model =
      target.upstream === model.upstream && target.upstreamModel === model.upstreamModel
        ? model
        : { ...model, upstream: target.upstream, upstreamModel: target.upstreamModel };
    // One request per target: the same model name on upstreams of other kinds goes out in each one's API.
    const key = `${target.upstream}\n${target.upstreamModel}`;
    if (cannot.has(key)) continue;
    let call = built.get(key);
    if (!call) {
      try {
        call = await build(served);
      } catch (err) {
        if (!(err instanceof GatewayError)) throw err;
        refused ??= err;
        cannot.add(key);
        continue;
      }
      built.set(key, call);
    }
    signal = call.signal;
    if (tried > 0) {
      // A short Retry-After of the same upstream is waited out; else the jittered backoff.
      const ra = lastAnswer?.res.status === 429 && lastAnswer.served.upstream === target.upstream ? retryAfterMs(lastAnswer.res, core.now()) : null;
      const wait = ra !== null && ra <= routing.maxRetryAfterMs ? ra : Math.random() * routing.backoffMs * 2 ** (tried - 1);
      await pause(Math.min(wait, routing.deadlineMs - (core.now() - started)), signal);
      if (signal?.aborted) break;
    }
    let res: UpstreamResponse;
    try {
      res = await callUpstream(core, target.upstream, call, ctx.observed.record, ctx.key.accountId);
    } catch (err) {
      if (signal?.aborted) {
        lastAnswer?.res.discard();
        throw err;
      }
      if (err instanceof GatewayError && err.code === 'model_unavailable') {
        unavailable ??= err;
        continue;
      }
      tried++;
      lastError = err;
      if (lastAnswer) dropAnswer(core, ctx, lastAnswer);
      lastAnswer = null;
      if (options.once && !isConnectionFailure(err)) throw err;
      continue;
    }
    tried++;
    if (lastAnswer) dropAnswer(core, ctx, lastAnswer);
    lastAnswer = null;
    lastError = null;
    if (options.whole && res.status >= 200 && res.status < 300) {
      // The body's time is the upstream's too (Server-Timing, the overhead histogram): the
      // answer is whole only once its last byte came.
      const reading = performance.now();
      try {
        res = wholeAnswer(res, await res.text());
        ctx.observed.record.upstreamMs += performance.now() - reading;
      } catch (err) {
        ctx.observed.record.upstreamMs += performance.now() - reading;
        // The client left (or shutdown cut the call) after the 200: the answer goes back as
        // it failed, for the route to bill the prompt the upstream read.
        if (signal?.aborted) {
          ctx.observed.record.upstream = target.upstream;
          return { res: failedAnswer(res, err), served };
        }
        core.breaker.failure(target.upstream, ctx.key.accountId);
        lastError = transportFailure(core, target.upstream, call, err);
        if (options.once) throw lastError;
        continue;
      }
    }
    if (options.begin && res.status >= 200 && res.status < 300) {
      try {
        await options.begin(res);
      } catch (err) {
        // The client left (or shutdown cut the call) after the 200: the route bills what it must.
        if (signal?.aborted) {
          ctx.observed.record.upstream = target.upstream;
          return { res: failedAnswer(res, err), served };
        }
        res.discard();
        core.breaker.failure(target.upstream, ctx.key.accountId);
        lastError = err instanceof GatewayError ? err : transportFailure(core, target.upstream, call, err);
        if (options.once) throw lastError;
        continue;
      }
    }
    if (!retryable(res.status) || (options.once && res.status !== 429)) {
      ctx.observed.record.upstream = target.upstream;
      return { res, served };
    }
    if (res.status === 429) {
      const wait = retryAfterMs(res, core.now());
      const next = order[(n + 1) % order.length]!;
      // A long Retry-After is not waited out: the 429 is relayed unless another upstream can serve.
      if (wait !== null && wait > routing.maxRetryAfterMs) {
        if (next.upstream === target.upstream) return { res, served };
        (resting ??= new Set()).add(target.upstream);
      }
    }
    lastAnswer = { res, served };
  }
  if (lastAnswer) {
    ctx.observed.record.upstream = lastAnswer.served.upstream;
    return lastAnswer;
  }
  if (lastError) throw lastError;
  throw unavailable ?? refused ?? new GatewayError('model_unavailable', 'The model is temporarily unavailable. Try again later.');
}

/** An answer whose body was read whole: it is read again from its text (one object, no closures: every plain call makes one). */
class WholeAnswer implements UpstreamResponse {
  readonly status: number;
  constructor(
    private readonly res: UpstreamResponse,
    private readonly whole: string,
  ) {
    this.status = res.status;
  }
  header(name: string): string | undefined {
    return this.res.header(name);
  }
  get body(): AsyncIterable<Uint8Array> {
    const bytes = Buffer.from(this.whole);
    return (async function* () {
      yield bytes;
    })();
  }
  text(): Promise<string> {
    return Promise.resolve(this.whole);
  }
  discard(): void {}
}
const wholeAnswer = (res: UpstreamResponse, text: string): UpstreamResponse => new WholeAnswer(res, text);

/** An answer whose body failed to be read (`err`): reading it fails the same way. */
function failedAnswer(res: UpstreamResponse, err: unknown): UpstreamResponse {
  return {
    status: res.status,
    header: (h) => res.header(h),
    body: {
      [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(err) }),
    },
    text: () => Promise.reject(err),
    discard() {},
  };
}
