/**
 * A hold the store did not answer in time may still land after the caller answered 503 (Redis
 * runs a script it was sent; PostgreSQL a statement). Such a hold would keep the wallet's money
 * for the hold TTL with no call to release it: the meter releases it soon after. Here the
 * store places the hold and then fails, as a store answering after the timeout would; and a
 * release the store fails is tried again the same way.
 */
import { expect, it } from 'vitest';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, eventually, MODEL, postChat, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

it('a hold that lands after its placement failed (503) is released, not kept for the hold TTL', async () => {
  const up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  const real = createMemoryStores();
  let late = 1;
  const billing = Object.create(real.billing) as Stores['billing'];
  // The hold is placed, and then the store is reported unreachable (a timeout).
  billing.placeHold = async (req) => {
    const r = await real.billing.placeHold(req);
    if (late-- > 0) throw new StoreUnavailableError('billing store timed out (injected, after the hold landed)');
    return r;
  };
  if (real.billing.hitAndPlaceHold) {
    billing.hitAndPlaceHold = async (hit, req) => {
      const r = await real.billing.hitAndPlaceHold!(hit, req);
      if (late-- > 0) throw new StoreUnavailableError('billing store timed out (injected, after the hold landed)');
      return r;
    };
  }
  const g = await startGateway({ ...setup.options, stores: { ...real, billing } });
  try {
    const refused = await postChat(g.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 });
    expect(refused.status).toBe(503);
    await refused.text();
    expect(up.requests).toHaveLength(0);
    // The late hold is there at first, and released soon after: nothing is left held.
    await eventually(async () => (await real.billing.wallet(ACCOUNT)).held === 0n, 'the late hold released', 3_000);
    // The next call holds and bills as usual.
    expect((await postChat(g.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 })).status).toBe(200);
  } finally {
    await g.close();
    await up.close();
  }
});

it('a release the store fails (an upstream 400: nothing produced) is tried again, not left to the hold TTL', async () => {
  const up = await startTestUpstream();
  up.setBehavior({ kind: 'error', status: 400, message: 'bad request upstream' });
  const setup = testConfig({ upstreamUrl: up.url });
  const real = createMemoryStores();
  let failing = 1;
  const billing = Object.create(real.billing) as Stores['billing'];
  billing.release = async (accountId, holdId) => {
    if (failing-- > 0) throw new StoreUnavailableError('billing store unreachable (injected)');
    return real.billing.release(accountId, holdId);
  };
  const g = await startGateway({ ...setup.options, stores: { ...real, billing } });
  try {
    const res = await postChat(g.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 });
    expect(res.status).toBe(400);
    await res.text();
    expect(failing).toBeLessThan(1);
    await eventually(async () => (await real.billing.wallet(ACCOUNT)).held === 0n, 'the hold released on a later try', 3_000);
    // Nothing was charged.
    expect((await real.billing.ledger(ACCOUNT)).filter((e) => e.units.kind !== 'credit')).toEqual([]);
  } finally {
    await g.close();
    await up.close();
  }
});
