/**
 * Idempotency-Key on billable POSTs, with Stripe's semantics, scoped per API key:
 * - the same key and body replays the first answer, with no second upstream call or charge
 *   (`Idempotent-Replayed: true`);
 * - a duplicate while the first is still running gets 409 idempotency_conflict;
 * - the same key with a different body (or path) gets 422 idempotency_mismatch.
 * Only answers that completed with a status below 500 (other than 402, 409 and 429) are
 * kept; anything else forgets the key, so the request can be retried with it. A streamed
 * answer is kept once the stream finished; one the client abandoned is forgotten.
 */
import { createHash } from 'node:crypto';
import type { RequestContext } from './core.js';
import { GatewayError } from './errors.js';
import type { IdempotencyStore } from './stores/types.js';
import { Response } from '@whatwg-node/server';

const REPLAY_TTL_MS = 24 * 60 * 60 * 1000;
/** A crashed instance's in-flight marker stops blocking retries after this. */
const LOCK_TTL_MS = 10 * 60 * 1000;
const MAX_STORED_BYTES = 8 * 1024 * 1024;
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;
/** Headers replayed with a stored answer; rate-limit state is the replay's own. */
const KEPT_HEADERS = ['content-type', 'deprecation', 'sunset', 'location'];

const unstorable = (status: number) => status >= 500 || status === 402 || status === 409 || status === 429;

export async function withIdempotency(
  store: IdempotencyStore,
  ctx: RequestContext,
  path: string,
  run: () => Promise<Response>,
): Promise<Response> {
  const idemKey = ctx.request.headers.get('idempotency-key');
  if (idemKey === null) return run();
  if (!KEY_PATTERN.test(idemKey)) {
    throw new GatewayError('invalid_request', 'The Idempotency-Key header must be 1 to 255 visible ASCII characters.', {
      param: 'Idempotency-Key',
    });
  }
  const bytes = await ctx.body();
  const fingerprint = createHash('sha256').update(`POST ${path}\n`).update(bytes).digest('hex');
  const scope = `${ctx.key.id}:${createHash('sha256').update(idemKey).digest('hex')}`;
  const begun = await store.begin(scope, fingerprint, LOCK_TTL_MS).catch((err: unknown) => {
    throw new GatewayError('service_unavailable', 'The idempotency store is unreachable.', {
      headers: { 'retry-after': '1' },
      cause: err,
    });
  });
  if (begun.state !== 'started') {
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
    const headers = new Headers({ ...stored.headers, ...ctx.headers, 'idempotent-replayed': 'true' });
    return new Response(Buffer.from(stored.body, 'base64'), { status: stored.status, headers });
  }

  let res: Response;
  try {
    res = await run();
  } catch (err) {
    await store.abandon(scope).catch(() => undefined);
    throw err;
  }
  if (unstorable(res.status) || !res.body) {
    if (unstorable(res.status)) await store.abandon(scope).catch(() => undefined);
    else await save(store, scope, fingerprint, res, []);
    return res;
  }
  // Tee the body as it streams out; store it when it ends.
  const parts: Uint8Array[] = [];
  let size = 0;
  const reader = res.body.getReader();
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const next = await reader.read();
          if (next.done) {
            // Stored before the end reaches the client, so a retry sent right after it replays.
            if (size <= MAX_STORED_BYTES) await save(store, scope, fingerprint, res, parts);
            else await store.abandon(scope).catch(() => undefined);
            controller.close();
            return;
          }
          size += next.value.byteLength;
          if (size <= MAX_STORED_BYTES) parts.push(next.value);
          controller.enqueue(next.value);
        } catch (err) {
          await store.abandon(scope).catch(() => undefined);
          controller.error(err);
        }
      },
      async cancel(reason) {
        await reader.cancel(reason).catch(() => undefined);
        await store.abandon(scope).catch(() => undefined);
      },
    },
    { highWaterMark: 0 },
  );
  return new Response(body, { status: res.status, headers: res.headers });
}

async function save(store: IdempotencyStore, scope: string, fingerprint: string, res: Response, parts: Uint8Array[]) {
  const headers: Record<string, string> = {};
  for (const h of KEPT_HEADERS) {
    const v = res.headers.get(h);
    if (v !== null) headers[h] = v;
  }
  const body = Buffer.concat(parts).toString('base64');
  await store.complete(scope, fingerprint, { status: res.status, headers, body }, REPLAY_TTL_MS).catch(() => undefined);
}
