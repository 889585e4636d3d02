/**
 * A video job that reaches the end of its life unfinished releases its hold. The tracker fails
 * it when a poll comes after `expires_at` (whole seconds, rounded down), but the store forgets
 * the record at its creation + `jobTtlMs`, up to a second later: a poll interval (1 s by
 * default) can step over that gap, and the check then finds no record to fail. The hold must
 * be released all the same, not renewed for as long as the instance runs.
 * One instance, memory stores on the gateway's clock, which the test moves.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { ACCOUNT, eventually } from '../helpers/gateway.js';
import { VIDEO, mediaSetup, videoCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';

let up: MediaUpstream;
beforeAll(async () => {
  up = await startMediaUpstream();
});
afterAll(async () => {
  await up?.close();
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a video job that expires unfinished', () => {
  it.each([
    ['a poll lands between expires_at and the end of the record', 9_700],
    ['the first poll after expires_at lands after the end of the record', 10_200],
  ])('releases its hold: %s', async (_case, jump) => {
    const JOB_TTL = 10_000;
    let offset = 0;
    // Half a second into a second: expires_at (rounded down) is 500 ms before the record's end.
    const t0 = Math.floor(Date.now() / 1000) * 1000 + 500;
    const now = () => t0 + offset;
    const stores = createMemoryStores({ now });
    const setup = mediaSetup(up.url, { jobTtlMs: JOB_TTL, jobPollIntervalMs: 100, holdTtlMs: 300, inFlightLeaseTtlMs: 60_000 }, { now });
    const gw = createGateway({ ...setup.options, stores });
    await gw.ready;
    try {
      const initial = await stores.billing.wallet(ACCOUNT);
      const res = await gw.fetch(
        new Request('http://gw.test/v1/videos', {
          method: 'POST',
          headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: VIDEO, prompt: 'never finishes', seconds: 4, size: '1280x720' }),
        }),
        { clientAddress: '192.0.2.1' },
      );
      expect(res.status).toBe(202);
      const job = (await res.json()) as { id: string };
      expect((await stores.billing.wallet(ACCOUNT)).held).toBe(videoCost('720P', 4));
      // Time passes a second at a time (the upstream never finishes); the last step jumps to `jump`.
      for (let t = 0; t < JOB_TTL - 1000; t += 1000) {
        offset = t;
        await sleep(150);
      }
      offset = jump;
      await sleep(500);
      offset = JOB_TTL + 200;
      await eventually(async () => (await stores.jobs.get(job.id)) === null, 'the record is gone');
      await eventually(async () => (await stores.billing.wallet(ACCOUNT)).held === 0n, 'the hold released');
      // Two more job lives later the hold is still not renewed back, and nothing was charged.
      for (let t = JOB_TTL + 1200; t < 3 * JOB_TTL; t += 2000) {
        offset = t;
        await sleep(100);
      }
      expect(await stores.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance, held: 0n });
      expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
    } finally {
      await gw.dispose();
    }
  }, 30_000);
});
