/**
 * The moderation guardrail over loopback upstreams: a prompt its upstream flags is refused
 * (400 content_filter, no model call), a plain answer it flags ends with content_filter; each
 * check is its own charge at the guardrail's price, in the ledger and the audit; a moderation
 * upstream that is down, erroring or slower than the timeout fails closed (503
 * guardrail_unavailable, no model call, nothing billed) unless the guardrail is failOpen; and
 * a stream an output moderation covers is refused rather than let by unjudged.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import type { LedgerEntry } from '../../src/index.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';

const DOWN = 'acct_mod_down';
const ERRORING = 'acct_mod_erroring';
const SLOW = 'acct_mod_slow';
const OPEN = 'acct_mod_open';
const [STALL_A, STALL_B, STALL_C] = ['acct_mod_stall_a', 'acct_mod_stall_b', 'acct_mod_stall_c'];
const POOR = 'acct_mod_poor';
const PRICE_NANO = 1_500_000n; // 0.0015 USD a check

let up: TestUpstream;
let mod: TestUpstream;
let broken: TestUpstream;
let slow: TestUpstream;
let stall: TestUpstream;
let gw: RunningGateway;
const keys: Record<string, string> = { [DOWN]: testKey(), [ERRORING]: testKey(), [SLOW]: testKey(), [OPEN]: testKey(), [STALL_A]: testKey(), [STALL_B]: testKey(), [STALL_C]: testKey(), [POOR]: testKey() };

beforeAll(async () => {
  [up, mod, broken, slow, stall] = await Promise.all([startTestUpstream(), startTestUpstream(), startTestUpstream(), startTestUpstream(), startTestUpstream()]);
  // Flags any input holding "FLAGME".
  mod.setBehavior({
    kind: 'custom',
    handle(_req, res, rec) {
      const input = (rec.body?.input as string[]) ?? [];
      const results = input.map((t) => ({ flagged: t.includes('FLAGME'), categories: {}, category_scores: {} }));
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'modr-1', model: rec.body?.model, results }));
    },
  });
  broken.setBehavior({ kind: 'error', status: 500 });
  slow.setBehavior({ kind: 'hang' });
  stall.setBehavior({ kind: 'hang' });
  const accounts = [DOWN, ERRORING, SLOW, OPEN, STALL_A, STALL_B, STALL_C].map((id) => ({ id, walletUsd: 10 }));
  // Room for a call's worst case or its output check, not both.
  accounts.push({ id: POOR, walletUsd: 0.01 });
  const setup = testConfig({ upstreamUrl: up.url, accounts, keys: Object.entries(keys).map(([account, key]) => ({ key, account })) });
  keys[ACCOUNT] = setup.devKey;
  const upstream = (url: string) => ({ baseUrl: url, apiKey: 'sk-moderation-key-0123456789', timeoutMs: 10_000 });
  setup.options.upstreams = {
    ...setup.options.upstreams,
    mod: upstream(mod.url),
    down: upstream('http://127.0.0.1:1/v1'),
    broken: upstream(broken.url),
    slow: upstream(slow.url),
    stall: upstream(stall.url),
  };
  const moderation = { kind: 'moderation' as const, model: 'omni-moderation-latest', priceUsd: '0.0015' };
  setup.options.guardrails = [
    { id: 'mod', ...moderation, upstream: 'mod', on: ['input', 'output'], accounts: [ACCOUNT] },
    { id: 'mod-down', ...moderation, upstream: 'down', accounts: [DOWN] },
    { id: 'mod-erroring', ...moderation, upstream: 'broken', accounts: [ERRORING] },
    { id: 'mod-slow', ...moderation, upstream: 'slow', timeoutMs: 300, accounts: [SLOW] },
    { id: 'mod-open', ...moderation, upstream: 'down', failOpen: true, accounts: [OPEN] },
    { id: 'mod-stall', ...moderation, upstream: 'stall', timeoutMs: 200, accounts: [STALL_A, STALL_B, STALL_C] },
    { id: 'mod-poor', ...moderation, priceUsd: '0.005', upstream: 'mod', on: ['output'], accounts: [POOR] },
  ];
  setup.options.admin = { tokenSha256: ADMIN_SHA, label: 'ops' };
  gw = await startGateway(setup.options);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([up, mod, broken, slow, stall].map((u) => u?.close()));
});

beforeEach(() => {
  up.requests.length = 0;
  mod.requests.length = 0;
  up.setBehavior({ kind: 'json', content: 'A calm answer.' });
});

async function chat(account: string, content: string, stream = false): Promise<{ res: Response; body: Record<string, any>; entries: LedgerEntry[] }> {
  const res = await fetch(`${gw.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${keys[account]}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], stream }),
  });
  const body = stream && res.status === 200 ? {} : ((await res.json()) as Record<string, any>);
  const id = res.headers.get('x-request-id')!;
  let entries: LedgerEntry[] = [];
  await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'no open hold');
  entries = (await gw.gateway.admin.ledger(account)).filter((e) => e.id.startsWith(id));
  return { res, body, entries };
}

const checks = (entries: LedgerEntry[]) => entries.filter((e) => e.units.kind === 'guardrail');

describe('a moderation guardrail', () => {
  it('checks the prompt and the answer, each check its own charge at its price, and the audit is clean', async () => {
    const { res, body, entries } = await chat(ACCOUNT, 'Tell me about tides.');
    expect(res.status).toBe(200);
    expect(body.choices[0].message.content).toBe('A calm answer.');
    expect(mod.requests.map((r) => r.body?.input)).toEqual([['Tell me about tides.'], ['A calm answer.']]);
    expect(mod.requests[0]!.path).toBe('/v1/moderations');
    const billed = checks(entries);
    expect(billed.map((e) => e.units)).toEqual([
      { kind: 'guardrail', id: 'mod', checks: 1 },
      { kind: 'guardrail', id: 'mod', checks: 1 },
    ]);
    for (const e of billed) expect(e.cost).toBe(PRICE_NANO);
    expect(entries.filter((e) => e.units.kind === 'tokens')).toHaveLength(1);
    expect(await auditBooks(gw.stores, { account: ACCOUNT })).toMatchObject({ ok: true });
  });

  it('refuses a prompt it flags: 400 content_filter naming it, no model call, only the check billed', async () => {
    const { res, body, entries } = await chat(ACCOUNT, 'Please FLAGME now.');
    expect(res.status).toBe(400);
    expect(body.error).toMatchObject({ code: 'content_filter', metadata: { guardrail: 'mod' } });
    expect(up.requests).toHaveLength(0);
    expect(entries.map((e) => e.units)).toEqual([{ kind: 'guardrail', id: 'mod', checks: 1 }]);
  });

  it('ends a plain answer it flags with content_filter, its text withheld, the answer billed in full', async () => {
    up.setBehavior({ kind: 'json', content: 'Here you go: FLAGME.' });
    const { res, body, entries } = await chat(ACCOUNT, 'Say something.');
    expect(res.status).toBe(200);
    expect(body.choices[0]).toMatchObject({ finish_reason: 'content_filter', message: { content: '' } });
    expect(JSON.stringify(body)).not.toContain('FLAGME');
    expect(entries.filter((e) => e.units.kind === 'tokens')).toHaveLength(1);
    expect(checks(entries)).toHaveLength(2);
  });

  it("judges every text of the answer the client reads: a chat message's reasoning and its refusal too", async () => {
    for (const side of ['reasoning_content', 'refusal']) {
      up.setBehavior({
        kind: 'json',
        body: { id: 'c', object: 'chat.completion', created: 1, model: 'up', choices: [{ index: 0, message: { role: 'assistant', content: 'fine answer', [side]: 'secret FLAGME thoughts' }, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 9, total_tokens: 14 } },
      });
      mod.requests.length = 0;
      const { res, body } = await chat(ACCOUNT, 'Think first.');
      expect(res.status).toBe(200);
      expect(mod.requests.at(-1)?.body?.input, side).toEqual(['secret FLAGME thoughts', 'fine answer']);
      expect(body.choices[0].finish_reason, side).toBe('content_filter');
      expect(JSON.stringify(body), side).not.toContain('FLAGME');
    }
  });

  it("holds an output check with the call: one that does not fit beside it is a 402 before the model is asked, nothing paid", async () => {
    up.setBehavior({ kind: 'json', content: 'answer text', usage: { prompt_tokens: 10, completion_tokens: 2600 } });
    const before = await gw.stores.billing.wallet(POOR);
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keys[POOR]}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'A long one.' }], max_tokens: 3000 }),
    });
    expect(res.status).toBe(402);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/guardrail "mod-poor"/);
    expect(up.requests).toHaveLength(0);
    await eventually(async () => (await gw.stores.billing.openHolds(POOR)) === 0, 'no open hold');
    expect(await gw.stores.billing.wallet(POOR)).toEqual(before);
    expect((await gw.gateway.admin.ledger(POOR)).filter((e) => e.units.kind !== 'credit')).toEqual([]);
    // A call that fits with its check is answered, and both are charged.
    up.setBehavior({ kind: 'json', content: 'short', usage: { prompt_tokens: 10, completion_tokens: 5 } });
    const fits = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keys[POOR]}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'A short one.' }], max_tokens: 100 }),
    });
    expect(fits.status).toBe(200);
    await eventually(async () => (await gw.stores.billing.openHolds(POOR)) === 0, 'no open hold');
    const id = fits.headers.get('x-request-id')!;
    const entries = (await gw.gateway.admin.ledger(POOR)).filter((e) => e.id.startsWith(id));
    expect(entries.map((e) => e.units.kind).sort()).toEqual(['guardrail', 'tokens']);
  });

  it('gives back the output check it held when the model fails: nothing held, only the input check billed', async () => {
    up.setBehavior({ kind: 'error', status: 500 });
    const { res, entries } = await chat(ACCOUNT, 'Will it answer?');
    expect(res.status).toBe(502);
    // `chat` waited for no open hold: the output check's hold went back with the call's.
    expect(entries.map((e) => e.units)).toEqual([{ kind: 'guardrail', id: 'mod', checks: 1 }]);
    expect(mod.requests).toHaveLength(1);
  });

  it('refuses a stream it would have to judge whole, before any model call or input check', async () => {
    const { res, body, entries } = await chat(ACCOUNT, 'Stream please.', true);
    expect(res.status).toBe(400);
    expect(body.error).toMatchObject({ param: 'stream' });
    expect(up.requests).toHaveLength(0);
    // Refused whatever the input check would say: it is not asked, and not billed.
    expect(mod.requests).toHaveLength(0);
    expect(checks(entries)).toHaveLength(0);
  });
});

describe('fail closed', () => {
  for (const [account, what] of [
    [DOWN, 'down'],
    [ERRORING, 'erroring'],
    [SLOW, 'slower than its timeout'],
  ] as const) {
    it(`a moderation upstream ${what}: 503 guardrail_unavailable, no model call, nothing billed`, async () => {
      const started = Date.now();
      const { res, body, entries } = await chat(account, 'Hello.');
      expect(res.status).toBe(503);
      expect(body.error).toMatchObject({ code: 'guardrail_unavailable', type: 'service_unavailable' });
      expect(up.requests).toHaveLength(0);
      expect(entries).toEqual([]);
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  }

  it('failOpen lets the call through when the check cannot answer (the check is not billed)', async () => {
    const { res, body, entries } = await chat(OPEN, 'Hello.');
    expect(res.status).toBe(200);
    expect(body.choices[0].message.content).toBe('A calm answer.');
    expect(up.requests).toHaveLength(1);
    expect(checks(entries)).toEqual([]);
  });

  it("checks that cannot connect count in the checks' own circuit: the upstream's models stay available", async () => {
    const circuitOf = async (name: string) => {
      const res = await gw.gateway.fetch(new Request('http://gw/admin/v1/upstreams', { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }));
      const { data } = (await res.json()) as { data: Array<{ name: string; state: string }> };
      return data.find((u) => u.name === name)?.state;
    };
    for (let i = 0; i < 6; i++) expect((await chat(DOWN, 'Hello.')).res.status).toBe(503);
    // Six connection failures (five open a circuit, whoever's calls they were).
    expect(await circuitOf('down')).toBe('closed');
    expect(up.requests).toHaveLength(0);
  });

  it('a check that times out counts against its circuit: after five, from three accounts, a check fails at once, never reaching the upstream', async () => {
    const before = stall.requests.length;
    const accounts = [STALL_A, STALL_B, STALL_C];
    for (let i = 0; i < 5; i++) {
      const { res, body } = await chat(accounts[i % 3]!, 'Hello.');
      expect(res.status).toBe(503);
      expect(body.error).toMatchObject({ code: 'guardrail_unavailable' });
    }
    expect(stall.requests.length - before).toBe(5);
    const { res, body, entries } = await chat(STALL_A, 'Hello.');
    expect(res.status).toBe(503);
    expect(body.error).toMatchObject({ code: 'guardrail_unavailable' });
    // The open circuit says when a check may answer again, as an unavailable model does.
    const retryAfter = Number(res.headers.get('retry-after'));
    expect(Number.isInteger(retryAfter) && retryAfter >= 1).toBe(true);
    expect(entries).toEqual([]);
    expect(stall.requests.length - before).toBe(5);
    expect(up.requests).toHaveLength(0);
  });
});

describe('over the built-in simulator', () => {
  it('its /moderations flags a text holding "[flag]": a prompt it flags is refused, another answered, each check billed', async () => {
    const setup = testConfig();
    setup.options.guardrails = [{ id: 'sim-mod', kind: 'moderation', upstream: 'test', model: 'omni-moderation-latest', priceUsd: '0.001' }];
    const sim = await startGateway(setup.options);
    try {
      const ask = (content: string) =>
        fetch(`${sim.baseURL}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }] }),
        });
      expect((await ask('hello')).status).toBe(200);
      const refused = await ask('hello [flag]');
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { error: unknown }).error).toMatchObject({ code: 'content_filter', metadata: { guardrail: 'sim-mod' } });
      await eventually(async () => (await sim.stores.billing.openHolds(ACCOUNT)) === 0, 'no open hold');
      const billed = (await sim.gateway.admin.ledger(ACCOUNT)).filter((e) => e.units.kind === 'guardrail');
      expect(billed.map((e) => e.cost)).toEqual([1_000_000n, 1_000_000n]);
    } finally {
      await sim.close();
    }
  });
});
