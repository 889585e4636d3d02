/**
 * OpenAI's Batch and Files APIs through the official SDK, on the built-in simulator: a file
 * and a batch created, polled to `completed`, the output read back; every line billed once at
 * the batch price to the key that created it; refused batches (402, bad lines, another
 * account's file) never run; the audit stays clean.
 */
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import type { LedgerEntry } from '../../src/stores/types.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';

const BATCH_PROMPT = '0.0000005';
const BATCH_COMPLETION = '0.000001';
const POOR = 'acct_poor_batch';
const OTHER = 'acct_other_batch';
const SNUG = 'acct_snug_batch';
const poorKey = testKey();
const otherKey = testKey();
const snugKey = testKey();
/** A developer key of the main account whose allow-list has the test model only. */
const narrowKey = testKey();

let gw: RunningGateway;
let devKey: string;
let agentKey: string;

beforeAll(async () => {
  const setup = testConfig({
    accounts: [
      { id: POOR, walletUsd: '0.0001' },
      { id: OTHER, walletUsd: 10 },
      { id: SNUG, walletUsd: '0.006' },
    ],
    keys: [
      { key: snugKey, account: SNUG, kind: 'developer' },
      { key: poorKey, account: POOR, kind: 'developer' },
      { key: otherKey, account: OTHER, kind: 'developer' },
      { key: narrowKey, account: ACCOUNT, kind: 'developer', models: [MODEL] },
    ],
    models: [
      { id: 'test/other', type: 'text', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002' } },
      { id: 'test/embed', type: 'text', upstream: 'test', embedding: true, pricing: { prompt: '0.0000001', completion: '0', batch: { prompt: '0.00000005', completion: '0' } } },
    ],
  });
  // The test model gets batch prices: half its list prices.
  const model = setup.options.models!.find((m) => m.id === MODEL)!;
  (model.pricing as Record<string, unknown>).batch = { prompt: BATCH_PROMPT, completion: BATCH_COMPLETION };
  devKey = setup.devKey;
  agentKey = setup.agentKey;
  gw = await startGateway({ ...setup.options, admin: { tokenSha256: ADMIN_SHA } });
});

afterAll(async () => {
  await gw.close();
});

const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: gw.baseURL, maxRetries: 0 });

function jsonl(lines: unknown[]): string {
  return `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`;
}

function chatLine(customId: string, content: string, model = MODEL) {
  return { custom_id: customId, method: 'POST', url: '/v1/chat/completions', body: { model, max_tokens: 50, messages: [{ role: 'user', content }] } };
}

async function upload(openai: OpenAI, text: string | Buffer) {
  return openai.files.create({ file: await toFile(typeof text === 'string' ? Buffer.from(text) : text, 'input.jsonl'), purpose: 'batch' });
}

async function waitDone(openai: OpenAI, id: string, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const b = await openai.batches.retrieve(id);
    if (['completed', 'failed', 'cancelled', 'expired'].includes(b.status)) return b;
    if (Date.now() > until) throw new Error(`batch still ${b.status}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The cost of a line at the batch price, from its own ledger entry's units. */
function batchCost(e: LedgerEntry): bigint {
  if (e.units.kind !== 'tokens') throw new Error('not tokens');
  return costOf([
    [parsePrice(BATCH_PROMPT), e.units.prompt],
    [parsePrice(BATCH_COMPLETION), e.units.completion],
  ]);
}

describe('batches through the official SDK (simulator)', () => {
  it('creates a file and a batch, runs it to completed, and bills each line once at the batch price to its key', async () => {
    const openai = client(devKey);
    const before = await gw.stores.billing.wallet(ACCOUNT);
    const file = await upload(openai, jsonl([chatLine('a', 'Hello there'), chatLine('b', 'Tell me a story'), chatLine('c', 'Count to three')]));
    expect(file).toMatchObject({ object: 'file', purpose: 'batch', status: 'processed', filename: 'input.jsonl' });
    expect((await openai.files.retrieve(file.id)).bytes).toBe(file.bytes);
    const created = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { run: 'one' } });
    expect(created).toMatchObject({ object: 'batch', status: 'in_progress', endpoint: '/v1/chat/completions', input_file_id: file.id, metadata: { run: 'one' } });
    expect(created.request_counts).toEqual({ total: 3, completed: 0, failed: 0 });

    const done = await waitDone(openai, created.id);
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    expect(done.error_file_id).toBeNull();
    const output = await (await openai.files.content(done.output_file_id!)).text();
    const lines = output.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.custom_id)).toEqual(['a', 'b', 'c']);
    for (const l of lines) {
      expect(l.response.status_code).toBe(200);
      expect(l.response.body.model).toBe(MODEL);
      expect(l.error).toBeNull();
    }
    expect((await openai.batches.list()).data.map((b) => b.id)).toContain(created.id);

    const charges = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${created.id}:`));
    expect(charges.map((e) => e.id).sort()).toEqual(['a', 'b', 'c'].map((c) => `${created.id}:${c}`));
    let total = 0n;
    for (const e of charges) {
      expect(e.cost).toBe(batchCost(e));
      expect(e.keyId).not.toBe('');
      expect(e.prices).toEqual({ prompt: BATCH_PROMPT, completion: BATCH_COMPLETION });
      total += e.cost;
    }
    const after = await gw.stores.billing.wallet(ACCOUNT);
    expect(after.balance).toBe(before.balance - total);
    expect(after.held).toBe(0n);
    expect((await auditBooks(gw.stores, { account: ACCOUNT })).differences).toEqual([]);
    // Operators see it too: the admin API's list (the console's and the CLI's source).
    const res = await fetch(`${gw.origin}/admin/v1/batches?account=${ACCOUNT}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const listed = (await res.json()) as { data: { id: string; status: string; key: string }[] };
    expect(listed.data.find((b) => b.id === created.id)).toMatchObject({ status: 'completed', key: charges[0]!.keyId });
  });

  it('runs Responses and embeddings lines too, each billed once at its batch price', async () => {
    const openai = client(devKey);
    const run = async (endpoint: '/v1/responses' | '/v1/embeddings', body: Record<string, unknown>) => {
      const file = await upload(openai, jsonl([{ custom_id: 'one', method: 'POST', url: endpoint, body }]));
      const b = await openai.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
      const done = await waitDone(openai, b.id);
      expect(done.status).toBe('completed');
      expect(done.request_counts).toEqual({ total: 1, completed: 1, failed: 0 });
      const line = JSON.parse((await (await openai.files.content(done.output_file_id!)).text()).trim());
      const charges = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).filter((e) => e.id === `${b.id}:one`);
      expect(charges).toHaveLength(1);
      return { line, charge: charges[0]! };
    };
    const responses = await run('/v1/responses', { model: MODEL, input: 'Say hi', max_output_tokens: 30 });
    expect(responses.line.response.body.object).toBe('response');
    expect(responses.charge.cost).toBe(batchCost(responses.charge));
    const embeddings = await run('/v1/embeddings', { model: 'test/embed', input: 'a sentence to embed' });
    expect(embeddings.line.response.body.object).toBe('list');
    expect(embeddings.charge.prices).toMatchObject({ prompt: '0.00000005' });
  });

  it('refuses a batch it cannot hold with 402, and runs nothing of it', async () => {
    const openai = client(poorKey);
    const file = await upload(openai, jsonl([chatLine('x', 'Hello'), chatLine('y', 'Hello again')]));
    const err = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).catch((e) => e);
    expect(err.status).toBe(402);
    // The first line's hold fits the wallet, the second's does not: what can be spent is the
    // whole wallet, not what the first line's hold left of it.
    expect(err.message).toContain('but only 0.0001 USD can be spent');
    expect((await openai.batches.list()).data).toEqual([]);
    expect(await chargesOf(gw.gateway.admin.ledger(POOR))).toEqual([]);
    expect((await gw.stores.billing.wallet(POOR)).held).toBe(0n);
  });

  it('a batch that fits only at its counted prompts (not their byte bound) bills every line once', async () => {
    // Each line's prompt is 10,000 bytes but about 2,000 tokens: the byte bounds of the two
    // lines (about 0.005 USD each) do not fit the 0.006 USD wallet, their counted prompts do.
    // The first attempt places one line's hold and releases it: the second must not reuse its
    // id, whose release closed it (a settle on it would then charge nothing).
    const openai = client(snugKey);
    const long = 'word '.repeat(2000);
    const file = await upload(openai, jsonl([chatLine('p', long), chatLine('q', long)]));
    const created = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const done = await waitDone(openai, created.id);
    expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
    const charges = await chargesOf(gw.gateway.admin.ledger(SNUG));
    expect(charges.map((c) => c.id).sort()).toEqual([`${created.id}:p`, `${created.id}:q`]);
    for (const c of charges) {
      expect(c.cost).toBeGreaterThan(0n);
      expect(c.cost).toBe(batchCost(c));
    }
    const wallet = await gw.stores.billing.wallet(SNUG);
    expect(wallet.held).toBe(0n);
    expect(wallet.balance).toBe(6_000_000n - charges.reduce((sum, c) => sum + c.cost, 0n));
  });

  it('a batch whose instance died while finalizing is adopted and completed, its lines not billed again', async () => {
    const openai = client(devKey);
    const file = await upload(openai, jsonl([chatLine('f1', 'Hello'), chatLine('f2', 'Hello again')]));
    const created = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    expect((await waitDone(openai, created.id)).status).toBe('completed');
    const billed = async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).filter((c) => c.id.startsWith(`${created.id}:`)).length;
    expect(await billed()).toBe(2);
    // What an instance that died between 'finalizing' and writing the files left behind.
    const record = (await gw.stores.batches.getBatch(ACCOUNT, created.id))!;
    const stuck = await gw.stores.batches.swapBatch({ ...record, status: 'finalizing', completedAt: null, outputFileId: null, errorFileId: null, owner: 'gone', ownerUntil: 0 });
    expect(stuck?.status).toBe('finalizing');
    const done = await waitDone(openai, created.id);
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
    const output = await (await openai.files.content(done.output_file_id!)).text();
    expect(output.trim().split('\n').map((l) => JSON.parse(l).custom_id)).toEqual(['f1', 'f2']);
    expect(await billed()).toBe(2);
  });

  it('refuses a bad line naming it (400), and a model the agent key may not use (403)', async () => {
    const openai = client(devKey);
    const bad = async (lines: unknown[] | string, key = devKey) => {
      const f = await upload(client(key), typeof lines === 'string' ? lines : jsonl(lines));
      return client(key).batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).catch((e) => e);
    };
    const dup = await bad([chatLine('a', 'x'), chatLine('a', 'y')]);
    expect(dup.status).toBe(400);
    expect(dup.error.param).toBe('input_file_id');
    expect(dup.message).toMatch(/Line 2/);
    const url = await bad([chatLine('a', 'x'), { ...chatLine('b', 'y'), url: '/v1/embeddings' }]);
    expect(url.status).toBe(400);
    expect(url.message).toMatch(/Line 2/);
    const json = await bad(`${JSON.stringify(chatLine('a', 'x'))}\n{not json\n`);
    expect(json.status).toBe(400);
    expect(json.message).toMatch(/Line 2/);
    // A key twice in one object: refused as the same body sent directly is (which would run?).
    const repeated = await bad(`${JSON.stringify(chatLine('a', 'x'))}\n${JSON.stringify(chatLine('b', 'y')).replace('"model":', '"model":"test/other","model":')}\n`);
    expect(repeated.status).toBe(400);
    expect(repeated.message).toMatch(/Line 2.*repeats the key "model"/);
    const unknown = await bad([chatLine('a', 'x'), chatLine('b', 'y'), chatLine('c', 'z', 'no/such-model')]);
    expect(unknown.status).toBe(400);
    expect(unknown.message).toMatch(/Line 3/);
    const agent = await bad([chatLine('a', 'x'), chatLine('b', 'y', 'test/other')], agentKey);
    expect(agent.status).toBe(403);
    expect(agent.message).toMatch(/Line 2/);
    // A developer key's allow-list refuses a model like any bad line: 400, not the agent's 403.
    const narrow = await bad([chatLine('a', 'x'), chatLine('b', 'y', 'test/other')], narrowKey);
    expect(narrow.status).toBe(400);
    expect(narrow.error.param).toBe('input_file_id');
    expect(narrow.message).toMatch(/Line 2/);
    // A line runs at the batch price: a service tier billed at another price is refused.
    const tier = await bad([chatLine('a', 'x'), { ...chatLine('b', 'y'), body: { ...chatLine('b', 'y').body, service_tier: 'priority' } }]);
    expect(tier.status).toBe(400);
    expect(tier.message).toMatch(/Line 2.*service_tier/);
    // The line past the limit is named (a blank line still counts in the numbering).
    const tooMany = await bad(['', ...Array.from({ length: 50_001 }, (_, i) => JSON.stringify(chatLine(`l${i}`, 'x')))].join('\n'));
    expect(tooMany.status).toBe(400);
    expect(tooMany.error.param).toBe('input_file_id');
    expect(tooMany.message).toMatch(/Line 50002/);
    const notUtf8 = await upload(openai, Buffer.concat([Buffer.from(`${JSON.stringify(chatLine('a', 'x'))}\n`), Buffer.from([0x7b, 0xff, 0x7d])]));
    const utf8 = await openai.batches.create({ input_file_id: notUtf8.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).catch((e) => e);
    expect(utf8.status).toBe(400);
    expect(utf8.message).toMatch(/Line 2/);
    expect((await openai.batches.list()).data.every((b) => b.status === 'completed')).toBe(true);
  });

  it('another account sees none of it (404), and lists nothing', async () => {
    const mine = client(devKey);
    const theirs = client(otherKey);
    const file = await upload(mine, jsonl([chatLine('a', 'Hello')]));
    const batch = await mine.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await waitDone(mine, batch.id);
    expect((await theirs.files.retrieve(file.id).catch((e) => e)).status).toBe(404);
    expect((await theirs.files.content(file.id).catch((e) => e)).status).toBe(404);
    expect((await theirs.files.delete(file.id).catch((e) => e)).status).toBe(404);
    expect((await theirs.batches.retrieve(batch.id).catch((e) => e)).status).toBe(404);
    expect((await theirs.batches.cancel(batch.id).catch((e) => e)).status).toBe(404);
    const err = await theirs.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).catch((e) => e);
    expect(err.status).toBe(404);
    expect((await theirs.files.list()).data).toEqual([]);
    expect((await theirs.batches.list()).data).toEqual([]);
    expect((await mine.files.delete(file.id)).deleted).toBe(true);
    expect((await mine.files.retrieve(file.id).catch((e) => e)).status).toBe(404);
  });
});
