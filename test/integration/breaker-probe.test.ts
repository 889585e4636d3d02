/**
 * A half-open circuit's probe always ends: a probe whose client hangs up before the upstream
 * answered counts as failed, and so does one still without an outcome at its deadline; either
 * way the circuit opens for one more cooldown and then closes again on a good probe, instead
 * of answering 503 to every tenant until a restart.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createBreaker } from '../../src/upstream/breaker.js';
import { postChat, type RunningGateway, startGateway, testConfig, testKey } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const COOLDOWN_MS = 10_000;
const ACCOUNTS = ['acct_1', 'acct_2', 'acct_3', 'acct_4'];

let up: TestUpstream | undefined;
let gw: RunningGateway | undefined;
afterEach(async () => {
  await gw?.close();
  await up?.close();
  gw = up = undefined;
});

/**
 * A gateway whose clock runs `skew.ms` ahead of the real one (so a test can wait out the
 * breaker's cooldown at once), with four accounts and no retries.
 */
async function start(routing: Record<string, number> = {}) {
  up = await startTestUpstream();
  const skew = { ms: 0 };
  const setup = testConfig({ upstreamUrl: up.url, now: () => Date.now() + skew.ms });
  const keys = Object.fromEntries(ACCOUNTS.map((id) => [id, testKey()]));
  gw = await startGateway({
    ...setup.options,
    accounts: [...setup.options.accounts!, ...ACCOUNTS.map((id) => ({ id, walletUsd: 10 }))],
    keys: [...setup.options.keys!, ...ACCOUNTS.map((id) => ({ key: keys[id]!, account: id, kind: 'developer' as const }))],
    routing: { retries: 0, ...routing },
  });
  const running = gw;
  const ask = (id: string, init: RequestInit = {}) =>
    postChat(running.baseURL, keys[id]!, { model: 'test/chat', messages: [{ role: 'user', content: 'hi' }] }, init);
  return { up, skew, ask };
}

/** Opens the circuit the fair way: upstream 5xx on the requests of three accounts. */
async function openCircuit(up: TestUpstream, ask: (id: string) => Promise<Response>) {
  up.setBehavior({ kind: 'error', status: 500, message: 'down' });
  // Five failures in a row (the threshold), from three accounts.
  for (const id of ['acct_1', 'acct_2', 'acct_3', 'acct_1', 'acct_2']) expect((await ask(id)).status).toBe(502);
  const refused = await ask('acct_4');
  expect(refused.status).toBe(503);
  expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('model_unavailable');
}

describe('the half-open probe', () => {
  it('a probe whose client hangs up before the upstream answers counts as failed; the next cooldown probes again and closes the circuit', async () => {
    const { up, skew, ask } = await start();
    await openCircuit(up, ask);

    // The cooldown has passed: the next call is the probe. The upstream holds it; its client leaves.
    skew.ms += COOLDOWN_MS;
    up.setBehavior({ kind: 'hang' });
    const calls = up.requests.length;
    const abort = new AbortController();
    const probe = ask('acct_4', { signal: abort.signal });
    await up.waitForRequests(calls + 1);
    abort.abort();
    await expect(probe).rejects.toThrow();

    // The probe failed: another cooldown, during which nothing reaches the upstream.
    up.setBehavior({ kind: 'json', content: 'back' });
    await new Promise((r) => setTimeout(r, 50));
    const during = await ask('acct_2');
    expect(during.status).toBe(503);
    expect(Number(during.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(up.requests.length).toBe(calls + 1);

    // After it, a probe goes through, succeeds, and every tenant is served again.
    skew.ms += COOLDOWN_MS;
    for (const id of ACCOUNTS) expect((await ask(id)).status).toBe(200);
  });

  it('a probe still without an outcome at its deadline counts as failed, and the circuit recovers after the next cooldown', async () => {
    // The upstream's own timeout (60 s) would end the probe far later than its deadline.
    const { up, skew, ask } = await start({ probeDeadlineMs: 1_000 });
    await openCircuit(up, ask);

    skew.ms += COOLDOWN_MS;
    up.setBehavior({ kind: 'hang' });
    const calls = up.requests.length;
    const abort = new AbortController();
    const hung = ask('acct_4', { signal: abort.signal }).catch(() => null);
    await up.waitForRequests(calls + 1);
    try {
      // While the probe may still answer, calls wait for it.
      expect((await ask('acct_1')).status).toBe(503);
      // Past its deadline it failed there: the circuit is open for a cooldown from that moment.
      skew.ms += 1_000;
      const during = await ask('acct_1');
      expect(during.status).toBe(503);
      expect(up.requests.length).toBe(calls + 1);

      up.setBehavior({ kind: 'json', content: 'back' });
      skew.ms += COOLDOWN_MS;
      for (const id of ACCOUNTS) expect((await ask(id)).status).toBe(200);
      expect(up.requests.length).toBe(calls + 1 + ACCOUNTS.length);
    } finally {
      abort.abort();
      await hung;
    }
  });
});

describe('the breaker, on its own', () => {
  it("only the current probe's outcome decides it: a late failure of an expired probe leaves its successor running", () => {
    let clock = 0;
    const breaker = createBreaker(() => clock, { threshold: 1, minAccounts: 1, cooldownMs: 100, probeDeadlineMs: 50 });
    breaker.failure('u', 'p');
    expect(breaker.admit('u')).toMatchObject({ ok: false });
    clock = 100;
    const first = breaker.admit('u');
    expect(first).toMatchObject({ ok: true, probe: expect.any(Number) });
    // A second probe is not let through while the first may still answer.
    expect(breaker.admit('u')).toEqual({ ok: false, retryAfterS: 1 });
    // Deadline at 150; open again from then until 250.
    clock = 249;
    expect(breaker.admit('u')).toMatchObject({ ok: false });
    clock = 250;
    const second = breaker.admit('u');
    expect(second).toMatchObject({ ok: true, probe: expect.any(Number) });
    if (!first.ok || !second.ok) throw new Error('unreachable');
    expect(second.probe).not.toBe(first.probe);
    // The first probe's failure arrives late: the second is still the one in flight.
    breaker.failure('u', 'p', first.probe);
    expect(breaker.admit('u')).toMatchObject({ ok: false });
    breaker.success('u', second.probe);
    expect(breaker.isOpen('u')).toBe(false);
    expect(breaker.admit('u')).toEqual({ ok: true, probe: null });
  });

  it('a probe that failed opens the circuit for another cooldown; a failure of an ordinary call does not end the probe', () => {
    let clock = 0;
    const breaker = createBreaker(() => clock, { threshold: 1, minAccounts: 1, cooldownMs: 100 });
    breaker.failure('u', 'p');
    clock = 100;
    const probe = breaker.admit('u');
    if (!probe.ok) throw new Error('expected a probe');
    breaker.failure('u', 'q');
    expect(breaker.admit('u')).toMatchObject({ ok: false });
    clock = 120;
    breaker.failure('u', 'p', probe.probe);
    clock = 219;
    expect(breaker.admit('u')).toMatchObject({ ok: false });
    clock = 220;
    expect(breaker.admit('u')).toMatchObject({ ok: true });
  });
});
