/**
 * Holds are atomic under concurrency: 200 simultaneous chats against a wallet worth exactly
 * 10 worst-case holds -> exactly 10 reach the upstream and succeed, 190 get 402, the balance
 * never goes below zero, and the final balance is the initial one minus the ledger.
 *
 * No timing is involved: the upstream holds every answer until all 190 refusals are in, so
 * the 10 holds are all open while the other 190 requests try theirs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatUsd } from '../../src/billing/money.js';
import { chatCost, promptBound, promptEstimate, worstCaseHold, chargesOf } from '../helpers/billing.js';
import { MODEL, eventually, postChat, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const MESSAGES = [{ role: 'user', content: 'hi' }];
const MAX_TOKENS = 1000;
const POOR = 'acct_poor';
const poorKey = testKey();

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({
    upstreamUrl: up.url,
    walletUsd: 100,
    accounts: [{ id: POOR, walletUsd: 0 }],
    keys: [{ key: poorKey, account: POOR, kind: 'developer' }],
  });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw.close();
  await up.close();
});

describe('200 concurrent chats against a wallet worth 10 worst-case holds', () => {
  let hold: bigint;
  beforeAll(async () => {
    hold = await worstCaseHold(MESSAGES, MAX_TOKENS);
  });

  it('the hold the gateway places is the computed worst case', async () => {
    // prompt estimate x 0.000001 + 1000 x 0.000002 USD: a little over 0.002 USD.
    expect(hold).toBeGreaterThan(2_000_000n);
    expect(hold).toBeLessThan(2_100_000n);

    // Probe: one call of the funded account, held at the upstream, shows its hold.
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    up.setBehavior({ kind: 'json', gate });
    const call = postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, max_tokens: MAX_TOKENS });
    await up.waitForRequests(1);
    const w = await gw.gateway.admin.wallet('acct_test');
    expect(w.heldUsd).toBe(formatUsd(hold));
    open();
    expect((await call).status).toBe(200);
  });

  it('exactly 10 succeed, 190 get 402, the balance stays >= 0 and ends exact', async () => {
    const initial = 10n * hold;
    await gw.gateway.admin.topUp(POOR, formatUsd(initial));
    expect((await gw.stores.billing.wallet(POOR)).balance).toBe(initial);

    const before = up.requests.length;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    // Each success reports usage well below the worst case, so settling frees money: if the
    // answers were not held back, later requests could be admitted and the count would drift.
    up.setBehavior({ kind: 'json', gate, content: 'ok', usage: { prompt_tokens: 3, completion_tokens: 1 } });

    // Sampled all along: neither the balance nor what is left after the holds goes negative.
    let minBalance = initial;
    let minFree = initial;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const w = await gw.stores.billing.wallet(POOR);
        if (w.balance < minBalance) minBalance = w.balance;
        if (w.balance - w.held < minFree) minFree = w.balance - w.held;
        await new Promise((r) => setTimeout(r, 1));
      }
    })();

    let refused = 0;
    const calls = Array.from({ length: 200 }, () =>
      postChat(gw.baseURL, poorKey, { model: MODEL, messages: MESSAGES, max_tokens: MAX_TOKENS }).then(async (res) => {
        const body = (await res.json()) as { error?: { code: string; metadata?: Record<string, unknown> } };
        if (res.status === 402) refused++;
        return { status: res.status, body };
      }),
    );
    // All refusals come back while the 10 admitted calls wait at the upstream.
    await eventually(() => refused === 190 && up.requests.length === before + 10, '190 refusals and 10 upstream calls', 20_000);
    const w = await gw.stores.billing.wallet(POOR);
    expect(w).toEqual({ balance: initial, held: initial });
    expect(await gw.stores.billing.openHolds(POOR)).toBe(10);
    open();
    const results = await Promise.all(calls);
    watching = false;
    await watcher;

    const ok = results.filter((r) => r.status === 200);
    const paymentRequired = results.filter((r) => r.status === 402);
    expect(ok).toHaveLength(10);
    expect(paymentRequired).toHaveLength(190);
    for (const r of paymentRequired) {
      expect(r.body.error).toMatchObject({ code: 'insufficient_quota', metadata: { limit_source: 'wallet', affordable_max_tokens: 0 } });
    }
    expect(up.requests.length).toBe(before + 10);

    await eventually(async () => (await gw.stores.billing.openHolds(POOR)) === 0, 'all holds settled');
    const ledger = await chargesOf(gw.gateway.admin.ledger(POOR));
    expect(ledger).toHaveLength(10);
    for (const e of ledger) expect(e.cost).toBe(chatCost(3, 1));
    const spent = ledger.reduce((s, e) => s + e.cost, 0n);
    const final = await gw.stores.billing.wallet(POOR);
    expect(final).toEqual({ balance: initial - spent, held: 0n });
    expect(minBalance).toBeGreaterThanOrEqual(0n);
    expect(minFree).toBeGreaterThanOrEqual(0n);
    expect(new Set(ledger.map((e) => e.id)).size).toBe(10);
  });
});

describe('what is held', () => {
  /** The amount held while one call of the funded account waits at the upstream. */
  async function heldDuring(body: Record<string, unknown>, usage: { prompt_tokens: number; completion_tokens: number }) {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    up.setBehavior({ kind: 'json', gate, usage });
    const before = up.requests.length;
    const call = postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, ...body });
    await up.waitForRequests(before + 1);
    const held = (await gw.stores.billing.wallet('acct_test')).held;
    open();
    const res = await call;
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id');
    await res.json();
    await eventually(async () => (await gw.stores.billing.openHolds('acct_test')) === 0, 'the hold to be settled');
    const entry = (await chargesOf(gw.gateway.admin.ledger('acct_test'))).find((e) => e.id === requestId)!;
    return { held, entry };
  }

  it('max_completion_tokens and n are part of the worst case', async () => {
    const est = promptBound(MESSAGES);
    const a = await heldDuring({ max_completion_tokens: 300 }, { prompt_tokens: 1, completion_tokens: 1 });
    expect(a.held).toBe(chatCost(est, 300));
    const b = await heldDuring({ max_tokens: 300, n: 3 }, { prompt_tokens: 1, completion_tokens: 1 });
    expect(b.held).toBe(chatCost(est, 900));
    // Without a limit, the model's maxOutputTokens (4096) is the worst case.
    const c = await heldDuring({}, { prompt_tokens: 1, completion_tokens: 1 });
    expect(c.held).toBe(chatCost(est, 4096));
    expect(c.entry.cost).toBe(chatCost(1, 1));
  });

  it('usage reported above the worst case is debited in full and the entry marked exceeded_hold', async () => {
    const est = await promptEstimate(MESSAGES);
    const { held, entry } = await heldDuring({ max_tokens: 10 }, { prompt_tokens: est, completion_tokens: 5_000 });
    expect(held).toBe(chatCost(promptBound(MESSAGES), 10));
    expect(entry.cost).toBe(chatCost(est, 5_000));
    expect(entry.held).toBe(held);
    expect(entry.exceededHold).toBe(true);
    expect(entry.measured).toBe('usage');
    expect(entry.units).toEqual({ kind: 'tokens', prompt: est, completion: 5_000 });
  });
});
