/**
 * The ring of recent requests: bounded by its size whatever the traffic, newest first, /v1
 * traffic only, filters, costs as exact USD strings, and per-model percentiles and error rates;
 * and the breaker's status as operators see it (closed, open, half-open while a probe runs).
 */
import { describe, expect, it } from 'vitest';
import { newRecord } from '../../src/observability/record.js';
import { createRecentRequests } from '../../src/observability/recent.js';
import { createBreaker } from '../../src/upstream/breaker.js';

function ended(ring: ReturnType<typeof createRecentRequests>, fields: Partial<ReturnType<typeof newRecord>>, ms: number) {
  const r = { ...newRecord(fields.requestId ?? 'req', 'POST', '/v1/chat/completions', null), ...fields };
  ring.observer.end(r, ms);
}

describe('recent requests ring', () => {
  it('keeps the last `size` /v1 requests, newest first, and filters them', () => {
    const ring = createRecentRequests(3, () => Date.UTC(2026, 10, 26));
    for (let i = 1; i <= 5; i++) ended(ring, { requestId: `req_${i}`, account: i % 2 ? 'odd' : 'even', status: i === 4 ? 502 : 200, costNano: 1_500_000_000n }, i);
    ended(ring, { requestId: 'admin', route: '/admin/v1/accounts' }, 1);
    ended(ring, { requestId: 'probe', route: '/health' }, 1);
    expect(ring.list({ limit: 10 }).map((r) => r.request_id)).toEqual(['req_5', 'req_4', 'req_3']);
    expect(ring.list({ limit: 1 })[0]).toMatchObject({ cost_usd: '1.5', time: '2026-11-26T00:00:00.000Z', latency_ms: 5 });
    expect(ring.list({ limit: 10, errors: true }).map((r) => r.request_id)).toEqual(['req_4']);
    expect(ring.list({ limit: 10, account: 'odd' }).map((r) => r.request_id)).toEqual(['req_5', 'req_3']);
    ended(ring, { requestId: 'unmatched', route: 'unmatched', status: 404 }, 1);
    expect(ring.list({ limit: 1 })[0]?.request_id).toBe('unmatched');
  });

  it('a ring of size 0 keeps nothing', () => {
    const ring = createRecentRequests(0, Date.now);
    ended(ring, { model: 'm' }, 1);
    expect(ring.list({ limit: 10 })).toEqual([]);
    expect(ring.modelStats()).toEqual([]);
  });

  it('per model: nearest-rank p50 and p95, 5xx errors apart from 4xx refusals', () => {
    const ring = createRecentRequests(100, Date.now);
    for (let ms = 1; ms <= 20; ms++) ended(ring, { model: 'a', status: ms <= 2 ? 503 : ms === 3 ? 429 : 200 }, ms);
    ended(ring, { model: null }, 1);
    expect(ring.modelStats()).toEqual([{ model: 'a', calls: 20, errors: 2, refused: 1, error_rate: 0.1, p50_ms: 10, p95_ms: 19, max_ms: 20 }]);
  });
});

describe('breaker status', () => {
  it('closed, then open with its failures, then half-open while the probe runs, then closed', () => {
    let clock = 1_000;
    const breaker = createBreaker(() => clock, { threshold: 2, minAccounts: 1, cooldownMs: 100, probeDeadlineMs: 50 });
    expect(breaker.status('u')).toEqual({ state: 'closed', recentFailures: 0, openedAt: null });
    breaker.failure('u', null);
    expect(breaker.status('u')).toEqual({ state: 'closed', recentFailures: 1, openedAt: null });
    breaker.failure('u', null);
    expect(breaker.status('u')).toEqual({ state: 'open', recentFailures: 2, openedAt: 1_000 });
    clock += 100;
    const admitted = breaker.admit('u');
    expect(admitted).toMatchObject({ ok: true });
    expect(breaker.status('u').state).toBe('half-open');
    // A probe past its deadline has failed: open again.
    clock += 50;
    expect(breaker.status('u').state).toBe('open');
    clock += 100;
    const probe = breaker.admit('u');
    breaker.success('u', probe.ok ? probe.probe : null);
    expect(breaker.status('u')).toEqual({ state: 'closed', recentFailures: 0, openedAt: null });
  });
});
