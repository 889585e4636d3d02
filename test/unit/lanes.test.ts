/**
 * The PostgreSQL stores' lanes: one call in flight per lane, and what arrives meanwhile goes
 * together in the next call, in arrival order; a bad operation fails alone.
 */
import { describe, expect, it } from 'vitest';
import { Lanes, MAX_BATCH } from '../../src/stores/postgres/lanes.js';

/** A batch runner that records each call and answers when the test says so. */
function recorder(answer: (lane: string, ops: number[]) => number[] | Error = (_l, ops) => ops.map((o) => o * 10)) {
  const calls: { lane: string; ops: number[]; done: () => void }[] = [];
  const run = (lane: string, ops: number[]) =>
    new Promise<number[]>((resolve, reject) => {
      calls.push({
        lane,
        ops,
        done: () => {
          const a = answer(lane, ops);
          if (a instanceof Error) reject(a);
          else resolve(a);
        },
      });
    });
  return { calls, run };
}

const turn = () => new Promise((r) => setImmediate(r));

describe('Lanes', () => {
  it('sends the first operation at once, and what arrives while it runs as one next call, in order', async () => {
    const { calls, run } = recorder();
    const lanes = new Lanes(run, () => false);
    const first = lanes.submit('a', 1);
    expect(calls.map((c) => c.ops)).toEqual([[1]]);
    const rest = [2, 3, 4].map((n) => lanes.submit('a', n));
    await turn();
    expect(calls).toHaveLength(1);
    expect(lanes.pending).toBe(4);
    calls[0]!.done();
    expect(await first).toBe(10);
    await turn();
    expect(calls.map((c) => c.ops)).toEqual([[1], [2, 3, 4]]);
    calls[1]!.done();
    expect(await Promise.all(rest)).toEqual([20, 30, 40]);
    await turn();
    expect(lanes.pending).toBe(0);
    // An idle lane sends at once again.
    const again = lanes.submit('a', 5);
    expect(calls.map((c) => c.ops).at(-1)).toEqual([5]);
    calls[2]!.done();
    expect(await again).toBe(50);
  });

  it('runs different lanes side by side', async () => {
    const { calls, run } = recorder();
    const lanes = new Lanes(run, () => false);
    const a = lanes.submit('a', 1);
    const b = lanes.submit('b', 2);
    expect(calls.map((c) => [c.lane, c.ops])).toEqual([
      ['a', [1]],
      ['b', [2]],
    ]);
    calls[1]!.done();
    calls[0]!.done();
    expect(await Promise.all([a, b])).toEqual([10, 20]);
  });

  it(`sends at most ${MAX_BATCH} operations in one call`, async () => {
    const { calls, run } = recorder();
    const lanes = new Lanes(run, () => false);
    const all = Array.from({ length: MAX_BATCH + 11 }, (_, i) => lanes.submit('a', i));
    calls[0]!.done();
    await turn();
    expect(calls[1]!.ops).toHaveLength(MAX_BATCH);
    calls[1]!.done();
    await turn();
    expect(calls[2]!.ops).toEqual(Array.from({ length: 10 }, (_, i) => MAX_BATCH + 1 + i));
    calls[2]!.done();
    expect(await Promise.all(all)).toEqual(Array.from({ length: MAX_BATCH + 11 }, (_, i) => i * 10));
  });

  it('retries a refused batch one operation at a time, so only the bad operation fails', async () => {
    const bad = new Error('bad operation 3');
    const lanes = new Lanes(
      async (_lane, ops: number[]) => {
        if (ops.includes(3)) throw bad;
        return ops.map((o) => o * 10);
      },
      (err) => err === bad,
    );
    const results = await Promise.allSettled([1, 2, 3, 4].map((n) => lanes.submit('a', n)));
    expect(results).toEqual([
      { status: 'fulfilled', value: 10 },
      { status: 'fulfilled', value: 20 },
      { status: 'rejected', reason: bad },
      { status: 'fulfilled', value: 40 },
    ]);
  });

  it('fails the whole batch at once when the database cannot be reached, and the lane recovers', async () => {
    let down = true;
    let calls = 0;
    const lost = new Error('connection lost');
    const lanes = new Lanes(
      async (_lane, ops: number[]) => {
        calls++;
        if (down) throw lost;
        return ops.map((o) => o * 10);
      },
      () => false,
    );
    const results = await Promise.allSettled([1, 2, 3].map((n) => lanes.submit('a', n)));
    expect(results.every((r) => r.status === 'rejected' && r.reason === lost)).toBe(true);
    // The first alone, then the other two together: no retry one by one.
    expect(calls).toBe(2);
    down = false;
    expect(await lanes.submit('a', 7)).toBe(70);
  });

  it('refuses a reply that does not answer every operation', async () => {
    const lanes = new Lanes(async (_lane, ops: number[]) => ops.slice(1), () => false);
    const results = await Promise.allSettled([lanes.submit('a', 1), lanes.submit('a', 2), lanes.submit('a', 3)]);
    expect(results[0]).toMatchObject({ status: 'rejected' });
    expect(String((results[1] as PromiseRejectedResult).reason)).toMatch(/2 operations returned 1 results/);
  });

  it('refuses a short reply to an operation retried alone, too', async () => {
    const bad = new Error('refused');
    const lanes = new Lanes(
      async (_lane, ops: number[]) => {
        if (ops.length > 1) throw bad;
        return ops[0] === 2 ? [] : ops.map((o) => o * 10);
      },
      (err) => err === bad,
    );
    const first = lanes.submit('a', 0);
    const results = await Promise.allSettled([first, lanes.submit('a', 1), lanes.submit('a', 2)]);
    expect(results.slice(0, 2)).toEqual([
      { status: 'fulfilled', value: 0 },
      { status: 'fulfilled', value: 10 },
    ]);
    expect(String((results[2] as PromiseRejectedResult).reason)).toMatch(/1 operations returned 0 results/);
  });
});
