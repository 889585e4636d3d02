/**
 * The simulator's waits between stream chunks leave no abort listener behind: one request
 * signal sees one wait per chunk, and listeners that piled up used to print
 * MaxListenersExceededWarning in the examples' logs. Aborting still stops a stream.
 */
import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { createSimulator } from '../../src/upstream/simulator/index.js';
import { pause, sleep } from '../../src/upstream/sleep.js';
import { loadTokenizer } from '../helpers/billing.js';

const warnings: Error[] = [];
const onWarning = (w: Error) => warnings.push(w);
process.on('warning', onWarning);
afterEach(() => {
  warnings.length = 0;
});

const streamCall = (signal: AbortSignal) => ({
  method: 'POST' as const,
  path: '/chat/completions',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'sim/chat', stream: true, messages: [{ role: 'user', content: 'tell me a long story about lighthouses' }] }),
  signal,
});

describe('simulator streams and abort listeners', () => {
  it('a stream of many chunks keeps at most one abort listener on the request signal, and none after', async () => {
    const sim = createSimulator('sim', { chunkDelayMs: 1, imageDelayMs: 0, videoDurationMs: 0 }, await loadTokenizer());
    const ac = new AbortController();
    const res = await sim.call(streamCall(ac.signal));
    let chunks = 0;
    let most = 0;
    for await (const _ of res.body) {
      chunks++;
      most = Math.max(most, getEventListeners(ac.signal, 'abort').length);
    }
    expect(chunks).toBeGreaterThan(20);
    expect(most).toBeLessThanOrEqual(1);
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
    await new Promise((r) => setImmediate(r));
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
    await sim.close();
  });

  it('an abort mid-stream still ends it with the abort reason', async () => {
    const sim = createSimulator('sim', { chunkDelayMs: 20, imageDelayMs: 0, videoDurationMs: 0 }, await loadTokenizer());
    const ac = new AbortController();
    const res = await sim.call(streamCall(ac.signal));
    const reason = new Error('client went away');
    const read = (async () => {
      let n = 0;
      for await (const _ of res.body) if (++n === 3) ac.abort(reason);
    })();
    await expect(read).rejects.toBe(reason);
    await sim.close();
  });

  it('sleep resolves after its time, rejects at once on an aborted signal, and cleans up either way', async () => {
    const ac = new AbortController();
    await sleep(5, ac.signal);
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
    const pending = sleep(10_000, ac.signal);
    ac.abort(new Error('stop'));
    await expect(pending).rejects.toThrow('stop');
    await expect(sleep(1, ac.signal)).rejects.toThrow('stop');
  });

  it('pause resolves after its time, or at once when its signal aborts or had aborted, leaving no listener', async () => {
    const ac = new AbortController();
    await pause(5, ac.signal);
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
    const pending = pause(10_000, ac.signal);
    ac.abort();
    await pending;
    // A signal aborted before the pause began: its event does not come again, and the pause
    // must not wait out its time (a stop would wait on it).
    const started = performance.now();
    await pause(10_000, ac.signal);
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
  });
});
