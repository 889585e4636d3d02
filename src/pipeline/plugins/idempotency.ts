/**
 * Idempotency-Key on billable POSTs, with Stripe's semantics, scoped per API key:
 * - the same key and body replays the first answer, with no second upstream call or charge
 *   (`Idempotent-Replayed: true`);
 * - a duplicate while the first is still running gets 409 idempotency_conflict;
 * - the same key with a different body (or path) gets 422 idempotency_mismatch.
 * Only answers that completed with a status below 500 (other than 402, 409 and 429) are
 * kept; anything else forgets the key, so the request can be retried with it. A streamed
 * answer is kept once the stream finished; one the client abandoned is forgotten.
 *
 * Stored answers cost the store's memory, which one tenant must not be able to fill for
 * everyone: an answer whose body passes `maxAnswerBytes` is not kept (its key is marked
 * used, so a retry gets 422 idempotency_key_unreplayable rather than a second call and
 * charge), and an account's stored answers count against `maxBytesPerAccount`, the oldest
 * evicted to make room (the store does that atomically per account).
 *
 * The in-flight marker lives as long as its call: it is renewed every third of its TTL until
 * the answer is stored or forgotten, so a retry during an hour-long stream still gets 409 (not
 * a second upstream call and charge), while a crashed instance's marker, no longer renewed,
 * lapses within one TTL and frees the key.
 */
import { createHash } from 'node:crypto';
import type { Exchange, RequestContext, Stage } from '../types.js';
import { GatewayError } from '../../errors.js';
import type { CallRecord } from '../../observability/record.js';
import type { IdempotencyBegin, IdempotencyQuota, IdempotencyStore, StoredResponse } from '../../stores/types.js';
import { Readable } from 'node:stream';
import { Response } from '@whatwg-node/server';

/** Whether answers are built with the server adapter's own Response (Node), which takes a Node Readable. */
const NODE_BODIES = Response !== globalThis.Response;

const REPLAY_TTL_MS = 24 * 60 * 60 * 1000;
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;
/** Headers replayed with a stored answer; rate-limit state is the replay's own. */
const KEPT_HEADERS = ['content-type', 'deprecation', 'sunset', 'location'];

const unstorable = (status: number) => status >= 500 || status === 402 || status === 409 || status === 429;

/** How long in-flight markers live unrenewed, and what stored answers may take. */
export interface IdempotencySettings {
  lockTtlMs: number;
  /** An answer with a larger body is not stored (its key then replays as 422). */
  maxAnswerBytes: number;
  /** The stored answers of one account, in the store's bytes (see IdempotencyQuota). */
  maxBytesPerAccount: number;
  /** Where an answer that could not be kept for its key is reported (the key is never named). */
  log?: (msg: string) => void;
}

/** One call's view of the settings: where its answer goes and what it may take. */
interface Keeping {
  store: IdempotencyStore;
  scope: string;
  fingerprint: string;
  maxAnswerBytes: number;
  quota: IdempotencyQuota;
  lockTtlMs: number;
  log: (msg: string) => void;
  /** The request's record: the answer's model and upstream are kept with it. */
  record: CallRecord;
}

/**
 * What "the same body" means for a key: the bytes, except a multipart body's boundary, which a
 * client draws at random each time it sends (the official SDKs do): the same parts sent again
 * under another boundary are the same request. (A Content-Type naming no single boundary is
 * hashed as it came: the operation refuses such a body anyway.)
 */
function fingerprintOf(path: string, contentType: string, bytes: Uint8Array): string {
  const hash = createHash('sha256').update(`POST ${path}\n`);
  const named = /^\s*multipart\/form-data\b/i.test(contentType) ? [...contentType.matchAll(/;\s*boundary\s*=\s*(?:"([^"]{1,70})"|([^\s;"]{1,70}))/gi)] : [];
  if (named.length !== 1) return hash.update(bytes).digest('hex');
  const boundary = Buffer.from(`--${named[0]![1] ?? named[0]![2]}`);
  const body = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // Only a delimiter is the boundary: at the body's start or a line's. The same text inside a
  // part's value is that value's own (two prompts that each quote their own boundary differ).
  let from = 0;
  for (let at = body.indexOf(boundary); at !== -1; at = body.indexOf(boundary, at + 1)) {
    if (at !== 0 && !(body[at - 2] === 13 && body[at - 1] === 10)) continue;
    hash.update(body.subarray(from, at)).update('\u0000boundary\u0000');
    from = at + boundary.length;
  }
  return hash.update(body.subarray(from)).digest('hex');
}

export async function withIdempotency(
  store: IdempotencyStore,
  ctx: RequestContext,
  path: string,
  run: () => Promise<Response>,
  settings: IdempotencySettings,
): Promise<Response> {
  const { lockTtlMs } = settings;
  const idemKey = ctx.request.headers.get('idempotency-key');
  if (idemKey === null) return run();
  if (!KEY_PATTERN.test(idemKey)) {
    throw new GatewayError('invalid_request', 'The Idempotency-Key header must be 1 to 255 visible ASCII characters.', {
      param: 'Idempotency-Key',
    });
  }
  const bytes = await ctx.body();
  const fingerprint = fingerprintOf(path, ctx.request.headers.get('content-type') ?? '', bytes);
  const scope = `${ctx.key.id}:${createHash('sha256').update(idemKey).digest('hex')}`;
  const begun = await store.begin(scope, fingerprint, lockTtlMs).catch((err: unknown) => {
    throw new GatewayError('service_unavailable', 'The idempotency store is unreachable.', {
      headers: { 'retry-after': '1' },
      cause: err,
    });
  });
  if (begun.state !== 'started') return replay(begun, fingerprint, ctx.observed.record);
  const keep: Keeping = {
    store,
    scope,
    fingerprint,
    maxAnswerBytes: settings.maxAnswerBytes,
    quota: { account: ctx.key.accountId, maxBytes: settings.maxBytesPerAccount },
    lockTtlMs,
    log: settings.log ?? (() => {}),
    record: ctx.observed.record,
  };
  const stopRenewing = keepInFlight(store, scope, fingerprint, lockTtlMs);
  let res: Response;
  try {
    res = await run();
  } catch (err) {
    stopRenewing();
    await store.abandon(scope).catch(() => undefined);
    throw err;
  }
  // An answer that failed after its status was set (a stream's error event, an upstream's own
  // failed answer relayed) is not kept: a retry with the key runs again.
  const failed = () => ctx.observed.record.errorCode !== null;
  if (unstorable(res.status) || !res.body || failed()) {
    stopRenewing();
    if (unstorable(res.status) || failed()) await store.abandon(scope).catch(() => undefined);
    else await save(keep, res, []);
    return res;
  }
  const body = teeBody(keep, res, res.body, stopRenewing, failed, ctx.request.signal);
  return new Response(body as ReadableStream<Uint8Array>, { status: res.status, headers: res.headers });
}

/**
 * Renews the in-flight marker every third of its TTL (so two renewals may fail in a row before
 * it lapses) until the returned function is called. A renewal that finds the marker gone
 * (lapsed during a store outage, or taken over) stops; a failing store is simply tried again.
 */
function keepInFlight(store: IdempotencyStore, scope: string, fingerprint: string, lockTtlMs: number): () => void {
  let busy = false;
  const timer = setInterval(
    () => {
      if (busy) return;
      busy = true;
      store.renew(scope, fingerprint, lockTtlMs).then(
        (held) => {
          busy = false;
          if (!held) clearInterval(timer);
        },
        () => void (busy = false),
      );
    },
    Math.max(10, Math.floor(lockTtlMs / 3)),
  );
  // A call's own work keeps the process alive; its marker's renewal need not.
  timer.unref();
  return () => clearInterval(timer);
}

/** The first answer again (same key, same body), or 422 (another body) or 409 (still running). */
function replay(begun: Exclude<IdempotencyBegin, { state: 'started' }>, fingerprint: string, record: CallRecord): Response {
  if (begun.fingerprint !== fingerprint) {
    throw new GatewayError(
      'idempotency_mismatch',
      'This Idempotency-Key was already used with a different request body. Use a new key for a new request.',
      { param: 'Idempotency-Key' },
    );
  }
  if (begun.state === 'in_flight') {
    throw new GatewayError('idempotency_conflict', 'A request with this Idempotency-Key is still in progress.', {
      param: 'Idempotency-Key',
    });
  }
  const stored = begun.response;
  if (stored.unreplayable) {
    throw new GatewayError(
      'idempotency_key_unreplayable',
      'The answer to the request with this Idempotency-Key was too large to keep, so it cannot be replayed. Use a new key to run the request again.',
      { param: 'Idempotency-Key' },
    );
  }
  // The access line and per-model counts name what answered (no tokens or cost: nothing is charged again).
  record.model ??= stored.model ?? null;
  record.upstream ??= stored.upstream ?? null;
  const headers = new Headers({ ...stored.headers, 'idempotent-replayed': 'true' });
  return new Response(Buffer.from(stored.body, 'base64'), { status: stored.status, headers });
}

/**
 * Tees the body as it streams out and stores it when it ends. A client that goes away cancels
 * the answer (so the call stops and bills what it produced) and forgets the key at once, so a
 * retry with it runs instead of meeting 409 until the lock expires.
 */
function teeBody(
  keep: Keeping,
  res: Response,
  source: ReadableStream<Uint8Array>,
  stopRenewing: () => void,
  /** Whether the answer failed after its status went out (a stream's error event): forgotten, not kept. */
  failed: () => boolean,
  /** Aborts when the client goes away. */
  signal: AbortSignal | undefined,
): ReadableStream<Uint8Array> | Readable {
  const { store, scope } = keep;
  const parts: Uint8Array[] = [];
  let size = 0;
  let finished = false;
  let kept = false;
  const reader = source.getReader();
  // A body of known length is whole for the client with its last byte, before the stream's
  // end: a client that holds it may retry at once (or the process may die) before a save
  // made at the end ran, and the retry would call the upstream and charge a second time.
  const length = Number(res.headers.get('content-length') ?? Number.NaN);
  let pulled = false;
  const next = async (): Promise<Uint8Array | null> => {
    pulled = true;
    const chunk = await reader.read();
    if (chunk.done) {
      // Abandoned meanwhile (its cancel ends the read): nothing to keep.
      if (finished) return null;
      finished = true;
      stopRenewing();
      if (failed()) {
        // A retry with the key runs again, as after any failed answer.
        await store.abandon(scope).catch(() => undefined);
        return null;
      }
      // Stored before the end reaches the client, so a retry sent right after it replays (or
      // is refused, for an answer too large to keep).
      if (kept) return null;
      const whole = size <= keep.maxAnswerBytes ? parts : null;
      if (!(await save(keep, res, whole))) keepSaving(keep, res, whole);
      return null;
    }
    size += chunk.value.byteLength;
    if (size <= keep.maxAnswerBytes) parts.push(chunk.value);
    else parts.length = 0;
    if (size === length && !failed()) {
      // Stored before the last byte leaves, so a retry sent the moment it arrives replays.
      kept = true;
      stopRenewing();
      const whole = size <= keep.maxAnswerBytes ? parts : null;
      // A store that cannot keep it now does not cut the answer: its charge has landed (the
      // answer is paid for), and cutting it would only send the client's retry to run and be
      // charged again. The key stays in flight (a retry gets 409) while the save is tried again.
      if (!(await save(keep, res, whole))) keepSaving(keep, res, whole);
    }
    return chunk.value;
  };
  const abandon = async (reason?: unknown) => {
    if (finished) return;
    finished = true;
    stopRenewing();
    // Not awaited: a cancel can wait on a read still pending upstream.
    reader.cancel(reason).catch(() => undefined);
    // A whole answer kept already (its last byte read) stays kept: the client that left after
    // it may retry, and its charge has landed.
    if (!kept) await store.abandon(scope).catch(() => undefined);
  };
  // A client gone before any of its answer was written (it left while the charge was being
  // made): nobody will read this body, and unread it would hold its key in flight (409) for as
  // long as the process runs. A whole answer (its length known) is paid for: it is read here
  // and kept, so a retry replays it. Anything else (a stream, which stops on its own) is
  // forgotten, so a retry runs.
  const unread = () => {
    if (pulled || finished) return;
    if (!Number.isFinite(length)) return void abandon();
    void (async () => {
      try {
        while (!kept && (await next()) !== null);
      } catch (err) {
        await abandon(err);
      }
    })();
  };
  if (signal?.aborted) queueMicrotask(unread);
  else signal?.addEventListener('abort', unread, { once: true });

  let body: ReadableStream<Uint8Array> | Readable;
  if (NODE_BODIES) {
    // On Node the server adapter pipes a Node Readable and destroys it when the client goes
    // away; a web stream it would only stop reading, leaving the call hanging.
    body = new Readable({
      read() {
        next().then(
          (chunk) => void this.push(chunk),
          (err: unknown) => {
            void abandon(err);
            this.destroy(err instanceof Error ? err : new Error(String(err)));
          },
        );
      },
      destroy(err, callback) {
        void abandon(err);
        callback(err);
      },
    });
  } else {
    body = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          try {
            const chunk = await next();
            if (chunk) controller.enqueue(chunk);
            else controller.close();
          } catch (err) {
            await abandon(err);
            controller.error(err);
          }
        },
        cancel: (reason) => abandon(reason),
      },
      { highWaterMark: 0 },
    );
  }
  return body;
}

/** The first wait before a failed save is tried again, and the longest between two tries. */
const SAVE_RETRY_MS = [500, 30_000] as const;

/**
 * Tries again, with backoff, to keep an answer the store could not keep when it went out,
 * keeping the key in flight meanwhile: a retry with it gets 409, never a second call and
 * charge. Given up after the in-flight TTL (the store was down that long): the marker then
 * lapses as a crashed instance's would, and a retry after that runs again.
 */
function keepSaving(keep: Keeping, res: Response, parts: Uint8Array[] | null): void {
  const stop = keepInFlight(keep.store, keep.scope, keep.fingerprint, keep.lockTtlMs);
  const until = Date.now() + keep.lockTtlMs;
  let wait: number = SAVE_RETRY_MS[0];
  const attempt = async () => {
    if (await save(keep, res, parts)) return stop();
    const left = until - Date.now();
    if (left <= 0) {
      stop();
      keep.log(`an answer under an Idempotency-Key could not be kept for ${keep.lockTtlMs} ms; a retry with its key after that runs again`);
      return;
    }
    // The last try is at the deadline itself, not at the last backoff step that fits before it.
    setTimeout(() => void attempt(), Math.min(wait, left)).unref();
    wait = Math.min(wait * 2, SAVE_RETRY_MS[1]);
  };
  setTimeout(() => void attempt(), wait).unref();
}

/** Stores the answer for replays (`parts` null: it was too large, so only that is recorded); false when the store could not. */
async function save(keep: Keeping, res: Response, parts: Uint8Array[] | null): Promise<boolean> {
  let stored: StoredResponse;
  if (parts === null) {
    stored = { status: res.status, headers: {}, body: '', unreplayable: true };
  } else {
    const headers: Record<string, string> = {};
    for (const h of KEPT_HEADERS) {
      const v = res.headers.get(h);
      if (v !== null) headers[h] = v;
    }
    stored = { status: res.status, headers, body: Buffer.concat(parts).toString('base64') };
  }
  if (keep.record.model) stored.model = keep.record.model;
  if (keep.record.upstream) stored.upstream = keep.record.upstream;
  return keep.store.complete(keep.scope, keep.fingerprint, stored, REPLAY_TTL_MS, keep.quota).then(
    () => true,
    () => false,
  );
}

/** The Idempotency-Key stage of billable POSTs; `sub` is the path after /v1 (part of the fingerprint). */
export function idempotency(
  store: IdempotencyStore,
  contextOf: (x: Exchange) => RequestContext,
  v1: string,
  settings: IdempotencySettings,
): Stage {
  return (x, next) => (x.route!.idempotent ? withIdempotency(store, contextOf(x), x.path.slice(v1.length), next, settings) : next());
}
