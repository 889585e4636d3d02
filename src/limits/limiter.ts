/**
 * The per-IP throttle and the per-key rate: exact sliding windows of
 * 60 s in the limit store, counted only when under the limit. Both refusals carry
 * Retry-After (whole seconds until the oldest counted request leaves the window, 1..59)
 * and retry-after-ms; authenticated answers carry the ratelimit headers.
 */
import type { Core } from '../core.js';
import { GatewayError } from '../errors.js';
import type { ApiKeyRecord, WindowResult } from '../stores/types.js';
import { createAddressResolver } from './client-address.js';

export const WINDOW_MS = 60_000;

export interface Limiter {
  clientAddress(peer: string, xForwardedFor: string | null): string;
  /** Counts the request against its IP, or throws 429 ip_requests_per_minute. */
  checkIp(ip: string): Promise<void>;
  /** Counts the request against its key; returns the headers for the answer, or throws 429. */
  checkKey(key: ApiKeyRecord): Promise<Record<string, string>>;
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

export function createLimiter(core: Core): Limiter {
  const resolve = createAddressResolver(core.cfg.trustProxy);
  const { keyRequestsPerMinute, ipRequestsPerMinute } = core.cfg.limits;
  const hit = (bucket: string, limit: number) => core.stores.limits.hit(bucket, limit, WINDOW_MS);
  return {
    clientAddress: resolve,
    async checkIp(ip) {
      const r = await hit(`ip:${ip}`, ipRequestsPerMinute);
      if (!r.allowed) throw rateLimited('ip_requests_per_minute', r, retryHeaders(r));
    },
    async checkKey(key) {
      const r = await hit(`key:${key.id}`, keyRequestsPerMinute);
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
    },
  };
}
