/**
 * The per-IP throttle and the per-key rate: exact sliding windows of
 * 60 s in the limit store, counted only when under the limit. Both refusals carry
 * Retry-After (whole seconds until the oldest counted request leaves the window, 1..59)
 * and retry-after-ms; authenticated answers carry the ratelimit headers.
 *
 * The key's check may be deferred to the request's hold (`deferKey`), so that on a store that
 * keeps windows beside the books the hit and the hold are one atomic step. The order of
 * checks stays what clients see: a request that ends before its hold (refused by validation,
 * an unknown model, a replayed Idempotency-Key...) runs the check on its own before its answer
 * goes out, so a limited key gets 429 rather than that answer, and an accepted request is
 * counted exactly once either way.
 */
import type { DeferredCheck } from '../billing/meter.js';
import type { GatewayConfig } from '../options.js';
import { GatewayError } from '../errors.js';
import type { ApiKeyRecord, LimitStore, WindowHit, WindowResult } from '../stores/types.js';
import { createAddressResolver, createIpBucket } from './client-address.js';
import { WINDOW_MS } from './window.js';

export { WINDOW_MS };

export interface Limiter {
  clientAddress(peer: string, xForwardedFor: string | null): string;
  /**
   * Counts the request against its IP, or throws 429 ip_requests_per_minute. Synchronous
   * (undefined, or a throw) when the store counts in this process's memory; else a promise.
   */
  checkIp(ip: string): Promise<void> | undefined;
  /** Counts the request against its key; returns the headers for the answer, or throws 429. */
  checkKey(key: ApiKeyRecord): Promise<Record<string, string>>;
  /**
   * Runs `next` with the key's check deferred to the request's hold: the check is put on
   * `holder` (the request's exchange), where the hold takes it. Whatever `next` answers or
   * throws, a check still waiting then runs on its own first: a refusal replaces the answer
   * with the 429. The rate headers go into `headers`.
   */
  deferKey(holder: CheckHolder, key: ApiKeyRecord, headers: Record<string, string>, next: () => Promise<Response>): Promise<Response>;
}

/** Where a request's deferred key check waits until its hold (or the end of the request) takes it. */
export interface CheckHolder {
  keyCheck: DeferredCheck | null;
}

/** Takes the check waiting on `holder` and runs it, if any. */
function runWaiting(holder: CheckHolder): Promise<void> | undefined {
  const check = holder.keyCheck;
  if (!check) return undefined;
  holder.keyCheck = null;
  return check.run();
}


function retryHeaders(r: WindowResult): Record<string, string> {
  const seconds = Math.min(59, Math.max(1, Math.ceil(r.resetMs / 1000)));
  return { 'retry-after': String(seconds), 'retry-after-ms': String(Math.max(1, Math.ceil(r.resetMs))) };
}

function rateLimited(limit: 'key_requests_per_minute' | 'ip_requests_per_minute', r: WindowResult, headers: Record<string, string>) {
  const who = limit === 'key_requests_per_minute' ? 'this API key' : 'your IP address';
  return new GatewayError(
    'rate_limit_exceeded',
    `Rate limit reached for ${who}: ${r.limit} requests per minute. Try again in ${headers['retry-after']} s.`,
    { metadata: { limit }, headers: { ...headers } },
  );
}

/** The key's rate headers for a window result; throws the 429 (with them) when it refused. */
function keyHeaders(r: WindowResult): Record<string, string> {
  const resetS = Math.max(r.resetMs > 0 ? 1 : 0, Math.ceil(r.resetMs / 1000));
  const headers: Record<string, string> = {
    'ratelimit-policy': `"key";q=${r.limit};w=${WINDOW_MS / 1000}`,
    ratelimit: `"key";r=${r.remaining};t=${resetS}`,
    'x-ratelimit-limit-requests': String(r.limit),
    'x-ratelimit-remaining-requests': String(r.remaining),
    'x-ratelimit-reset-requests': `${resetS}s`,
  };
  if (!r.allowed) throw rateLimited('key_requests_per_minute', r, { ...headers, ...retryHeaders(r) });
  return headers;
}

/** Nothing when the IP's hit was counted; the 429 when it was refused. */
function ipAnswer(r: WindowResult): undefined {
  if (!r.allowed) throw rateLimited('ip_requests_per_minute', r, retryHeaders(r));
  return undefined;
}

export function createLimiter(cfg: Pick<GatewayConfig, 'trustProxy' | 'limits'>, limits: LimitStore): Limiter {
  const resolve = createAddressResolver(cfg.trustProxy);
  const { keyRequestsPerMinute, ipRequestsPerMinute } = cfg.limits;
  const ipBucket = createIpBucket(cfg.limits.ipv6PrefixLength);

  const keyHit = (key: ApiKeyRecord): WindowHit => ({
    bucket: `key:${key.id}`,
    limit: keyRequestsPerMinute,
    windowMs: WINDOW_MS,
    accountId: key.accountId,
  });

  const limiter: Limiter = {
    clientAddress: resolve,
    checkIp(ip) {
      const bucket = `ip:${ipBucket(ip)}`;
      if (limits.hitNow) return ipAnswer(limits.hitNow(bucket, ipRequestsPerMinute, WINDOW_MS));
      return limits.hit(bucket, ipRequestsPerMinute, WINDOW_MS).then(ipAnswer);
    },
    async checkKey(key) {
      const h = keyHit(key);
      return keyHeaders(await limits.hit(h.bucket, h.limit, h.windowMs, h.accountId));
    },
    async deferKey(holder, key, headers, next) {
      const hit = keyHit(key);
      const check: DeferredCheck = {
        hit,
        settle: (r) => void Object.assign(headers, keyHeaders(r)),
        run: async () => check.settle(await limits.hit(hit.bucket, hit.limit, hit.windowMs, hit.accountId)),
      };
      holder.keyCheck = check;
      let res: Response;
      try {
        res = await next();
      } catch (err) {
        // Not taken before its answer: the check throws its 429 in place of `err` when the key is limited.
        await runWaiting(holder);
        throw err;
      }
      await runWaiting(holder);
      return res;
    },
  };
  return limiter;
}
