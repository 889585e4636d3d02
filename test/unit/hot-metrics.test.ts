/**
 * The request path's counters and histograms must expose exactly what prom-client's own would
 * for the same updates: same series, same buckets, same values, same text.
 */
import fc from 'fast-check';
import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { HotCounter, HotHistogram } from '../../src/observability/hot-metrics.js';

const BOUNDS = [0.001, 0.01, 0.1, 1, 10];
const label = fc.constantFrom('/v1/chat/completions', '/v1/models', 'un"usual\\route\n', '');

describe('hot metrics', () => {
  it('expose the same text as prom-client for any sequence of updates', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(label, fc.constantFrom('200', '402'), fc.double({ min: 0, max: 20, noNaN: true })), { maxLength: 60 }),
        async (updates) => {
          const ours = new Registry();
          const theirs = new Registry();
          const hc = new HotCounter('x_total', 'help of x', ['route', 'status'], ours);
          const hh = new HotHistogram('x_seconds', 'help of h', ['route'], BOUNDS, ours);
          const pc = new Counter({ name: 'x_total', help: 'help of x', labelNames: ['route', 'status'], registers: [theirs] });
          const ph = new Histogram({ name: 'x_seconds', help: 'help of h', labelNames: ['route'], buckets: BOUNDS, registers: [theirs] });
          for (const [route, status, v] of updates) {
            hc.inc(v, route, status);
            pc.inc({ route, status }, v);
            hh.observe(v, route);
            ph.observe({ route }, v);
          }
          const sorted = (text: string) => text.split('\n').sort().join('\n');
          expect(sorted(await ours.metrics())).toBe(sorted(await theirs.metrics()));
        },
      ),
      { numRuns: 100 },
    );
  });

  it('a metric without labels is one series; reset empties it', async () => {
    const r = new Registry();
    const c = new HotCounter('y_total', 'y', [], r);
    c.inc(2);
    c.inc(3);
    expect(await r.metrics()).toContain('y_total 5');
    r.resetMetrics();
    expect(await r.metrics()).not.toContain('y_total 5');
  });
});

describe('store timing', () => {
  it('times a class-based store through its prototype methods, keeping `this`, getters and errors', async () => {
    const { createMetrics } = await import('../../src/observability/metrics.js');
    const m = createMetrics({ path: '/metrics' }, { circuits: () => [], openHolds: () => 0, openStreams: () => 0 });
    class Billing {
      balance = 7;
      get doubled(): number {
        return this.balance * 2;
      }
      async placeHold(n: number): Promise<number> {
        return this.balance + n;
      }
      syncOp(): string {
        return 'sync';
      }
      async fails(): Promise<never> {
        throw new Error('store down');
      }
    }
    const inner = new Billing();
    const stores = m.timeStores({ billing: inner } as never) as unknown as { billing: Billing };
    expect(await stores.billing.placeHold(1)).toBe(8);
    expect(stores.billing.syncOp()).toBe('sync');
    inner.balance = 10;
    expect(stores.billing.doubled).toBe(20);
    await expect(stores.billing.fails()).rejects.toThrow('store down');
    const text = await (await m.answer(new Request('http://gw/metrics'), 'req_1')).text();
    expect(text).toMatch(/model_gateway_store_call_seconds_count\{operation="billing\.placeHold"\} 1/);
    expect(text).toMatch(/model_gateway_store_call_seconds_count\{operation="billing\.syncOp"\} 1/);
    expect(text).toMatch(/model_gateway_store_call_seconds_count\{operation="billing\.fails"\} 1/);
  });
});
