/**
 * The access line is serialised by hand for speed; it must be the very JSON pino writes for the
 * same fields (the slow path a custom logger gets), whatever the fields hold.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { accessLog, createLogger, isoNow } from '../../src/observability/logs.js';
import { type CallRecord, newRecord } from '../../src/observability/record.js';

/** The line written through each path for `record`, parsed. */
function bothPaths(record: CallRecord, totalMs: number): { fast: Record<string, unknown>; pino: Record<string, unknown> } {
  const fastLines: string[] = [];
  accessLog(createLogger('info', { write: (l: string) => fastLines.push(l) })).end(record, totalMs);
  // pino itself: the same fields logged as an object through a logger the fast path does not know.
  const pinoLines: string[] = [];
  const plain = createLogger('info', { write: (l: string) => pinoLines.push(l) });
  accessLog({ info: (e) => plain.info(e), warn: () => {}, error: () => {} }).end(record, totalMs);
  expect(fastLines).toHaveLength(1);
  expect(pinoLines).toHaveLength(1);
  expect(fastLines[0]!.endsWith('}\n')).toBe(true);
  const fast = JSON.parse(fastLines[0]!) as Record<string, unknown>;
  const viaPino = JSON.parse(pinoLines[0]!) as Record<string, unknown>;
  // The timestamps are taken a moment apart.
  expect(typeof fast.time).toBe('string');
  delete fast.time;
  delete viaPino.time;
  return { fast, pino: viaPino };
}

describe('the hand-built access line', () => {
  it('is what pino writes, for a billed call and for a refusal', () => {
    const billed = newRecord('req_0123', 'POST', '/v1/chat/completions', null);
    Object.assign(billed, {
      status: 200,
      keyId: 'key_1',
      account: 'acct',
      model: 'sim/chat',
      upstream: 'sim',
      upstreamMs: 12.345,
      ttfbMs: 3.21,
      promptTokens: 14,
      completionTokens: 20,
      costNano: 14_100n,
    });
    const a = bothPaths(billed, 40.06);
    expect(a.fast).toEqual(a.pino);
    expect(a.fast).toMatchObject({ level: 30, msg: 'access', cost_usd: '0.0000141', ms: 40.1, ttfb_ms: 3.2 });

    const refused = newRecord('req_0124', 'POST', 'unmatched', null);
    Object.assign(refused, { status: 402, limit: 'wallet', errorCode: 'insufficient_quota' });
    const b = bothPaths(refused, 0.04);
    expect(b.fast).toEqual(b.pino);
    expect(b.fast).toMatchObject({ key_id: null, model: null, limit: 'wallet' });
  });

  it('escapes whatever an account or model id holds exactly as pino does', () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), fc.option(fc.string()), fc.nat(), (account, route, model, status) => {
        const r = newRecord('req_x', 'GET', route, null);
        Object.assign(r, { account, model, status });
        const { fast, pino } = bothPaths(r, 1);
        expect(fast).toEqual(pino);
      }),
      { numRuns: 300 },
    );
  });

  it('stamps the time exactly as toISOString does, second after second (property)', () => {
    const edges = [0, 999, 1_000, 1_001, Date.UTC(2026, 11, 31, 23, 59, 59, 999), Date.UTC(2027, 0, 1), Date.UTC(10_000, 0, 1, 0, 0, 0, 5), -1, -1_001];
    for (const ms of edges) expect(isoNow(ms)).toBe(new Date(ms).toISOString());
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -62_000_000_000_000, max: 250_000_000_000_000 }), { minLength: 1, maxLength: 20 }), fc.nat({ max: 2_000 }), (starts, step) => {
        // Runs of times in one second and across seconds, in any order.
        for (const start of starts) for (const ms of [start, start + step, start + 1, start - step]) expect(isoNow(ms)).toBe(new Date(ms).toISOString());
      }),
    );
  });

  it('is not written below info', () => {
    const out: string[] = [];
    const log = createLogger('warn', { write: (l: string) => out.push(l) });
    accessLog(log).end(newRecord('req_y', 'GET', '/v1/models', null), 1);
    expect(out).toEqual([]);
  });
});
