/**
 * A batch on an upstream with OpenAI's Batch API (`batch: true`, a loopback server written
 * from OpenAI's documentation), through the official SDK: one rewritten input file goes up
 * (the upstream's model name, the brand applied), one upstream batch is polled to its end,
 * and its output comes back with the gateway's model name and ids; each answered line billed
 * once at the batch price; a cancel reaches the upstream batch and what it did not run is
 * released.
 */
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import { startBatchUpstream, type BatchUpstream } from '../helpers/batch-upstream.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig, UPSTREAM_API_KEY, UPSTREAM_MODEL, type RunningGateway } from '../helpers/gateway.js';

const LINE_COST = costOf([
  [parsePrice('0.0000005'), 11],
  [parsePrice('0.000001'), 7],
]);

let up: BatchUpstream;
let gw: RunningGateway;
let openai: OpenAI;

beforeAll(async () => {
  up = await startBatchUpstream();
  const setup = testConfig({
    brands: [{ id: 'kettleco', account: ACCOUNT, name: 'KettleCo', description: 'Kettles', voice: 'Speak like a kettle.' }],
    limits: { jobPollIntervalMs: 20 },
  });
  setup.options.upstreams = { test: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, batch: true } };
  (setup.options.models![0]!.pricing as Record<string, unknown>).batch = { prompt: '0.0000005', completion: '0.000001' };
  gw = await startGateway(setup.options);
  openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
});

afterAll(async () => {
  await gw.close();
  await up.close();
});

const line = (customId: string, content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: customId, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 30, messages: [{ role: 'user', content }], ...extra } });

async function submit(lines: string[]) {
  const file = await openai.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
  return openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

describe('a batch on an upstream with a Batch API', () => {
  it('goes up as one rewritten batch, comes back in the gateway’s names, each answered line billed once', async () => {
    const before = await gw.stores.billing.wallet(ACCOUNT);
    const batch = await submit([line('a', 'Hello'), line('b', 'Kettles?', { brand: 'kettleco' }), line('c', 'fail_me'), line('d', 'skip_me'), line('e', 'deny_me')]);
    await eventually(() => up.batches.length === 1, 'the upstream batch');
    expect((await openai.batches.retrieve(batch.id)).status).toBe('in_progress');
    const sent = up.inputs[0]!;
    expect(sent.map((l) => l.custom_id)).toEqual(['a', 'b', 'c', 'd', 'e']);
    for (const l of sent) expect((l.body as { model: string }).model).toBe(UPSTREAM_MODEL);
    // The brand is the gateway's: applied to the messages, never sent as a field.
    const branded = l2(sent[1]!);
    expect(JSON.stringify(branded.messages)).toContain('Speak like a kettle.');
    expect(branded.brand).toBeUndefined();
    up.finish();
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'completed', 'completed', 10_000);
    const done = await openai.batches.retrieve(batch.id);
    expect(done.request_counts).toEqual({ total: 5, completed: 2, failed: 3 });
    const out = (await (await openai.files.content(done.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
    expect(out.map((l) => l.custom_id)).toEqual(['a', 'b']);
    for (const l of out) {
      expect(l.response.body.model).toBe(MODEL);
      expect(l.id).toMatch(/^batch_req_/);
      // The gateway's own id, not the upstream's (the loopback numbers its ids: batch_req_1, ...).
      expect(l.id).not.toMatch(/^batch_req_\d+$/);
    }
    const errorText = await (await openai.files.content(done.error_file_id!)).text();
    const errors = errorText.trim().split('\n').map((l) => JSON.parse(l));
    expect(errors.map((l) => [l.custom_id, l.response?.status_code ?? null])).toEqual([
      ['c', 400],
      ['d', null],
      ['e', 502],
    ]);
    // A refused line reads as the same call refused directly: the upstream's words, its key out of them.
    expect(errors[0].response.body.error).toMatchObject({ type: 'invalid_request_error', code: 'bad_line', param: 'messages' });
    expect(errors[0].response.body.error.message).toMatch(/^bad request from key /);
    expect(errors[1].error).toMatchObject({ code: 'not_run' });
    // A refusal about the provider account is the upstream's failure, told in the gateway's words.
    expect(errors[2].response.body.error).toMatchObject({ code: 'upstream_error', type: 'upstream_error' });
    expect(errorText).not.toContain('not verified');
    expect(errorText).not.toContain(UPSTREAM_API_KEY.slice(8, 20));
    // The line-level error too, the key split in two in it.
    for (const part of [UPSTREAM_API_KEY.slice(0, 12), UPSTREAM_API_KEY.slice(12)]) expect(errorText).not.toContain(part);
    const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges.map((e) => e.id).sort()).toEqual([`${batch.id}:a`, `${batch.id}:b`]);
    for (const e of charges) expect(e.cost).toBe(LINE_COST);
    expect(await gw.stores.billing.wallet(ACCOUNT)).toEqual({ balance: before.balance - 2n * LINE_COST, held: 0n });
    expect((await auditBooks(gw.stores, { account: ACCOUNT })).differences).toEqual([]);
  });

  it('a cancel cancels the upstream batch: what it ran is billed, the rest released', async () => {
    const before = await gw.stores.billing.wallet(ACCOUNT);
    const batch = await submit([line('x', 'one'), line('y', 'two'), line('z', 'three')]);
    await eventually(() => up.batches.length === 2, 'the upstream batch');
    expect((await openai.batches.cancel(batch.id)).status).toBe('cancelling');
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'cancelled', 'cancelled', 10_000);
    expect(up.calls).toContain(`POST /batches/${up.batches[1]!.id}/cancel`);
    const done = await openai.batches.retrieve(batch.id);
    expect(done.request_counts).toEqual({ total: 3, completed: 1, failed: 0 });
    const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges.map((e) => e.id)).toEqual([`${batch.id}:x`]);
    expect(await gw.stores.billing.wallet(ACCOUNT)).toEqual({ balance: before.balance - LINE_COST, held: 0n });
  });

  it('a cancel the upstream refuses once is sent again at the next poll, not left to let every line run', async () => {
    const before = await gw.stores.billing.wallet(ACCOUNT);
    const batch = await submit([line('u', 'one'), line('v', 'two'), line('w', 'three')]);
    await eventually(() => up.batches.length === 3, 'the upstream batch');
    const upstreamId = up.batches[2]!.id;
    up.failCancels = 1;
    expect((await openai.batches.cancel(batch.id)).status).toBe('cancelling');
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'cancelled', 'cancelled', 10_000);
    expect(up.failCancels).toBe(0);
    expect(up.calls.filter((c) => c === `POST /batches/${upstreamId}/cancel`)).toHaveLength(2);
    // The upstream ran its first line before the cancel it took: that one is billed, the rest released.
    const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges.map((e) => e.id)).toEqual([`${batch.id}:u`]);
    expect(await gw.stores.billing.wallet(ACCOUNT)).toEqual({ balance: before.balance - LINE_COST, held: 0n });
  });
});

describe('an upstream batch that ends on its own', () => {
  it('cancelled upstream: the batch is cancelled here too, what ran billed and the rest released', async () => {
    const before = await gw.stores.billing.wallet(ACCOUNT);
    const batch = await submit([line('p', 'one'), line('q', 'two')]);
    await eventually(() => up.batches.some((x) => x.status === 'in_progress'), 'the upstream batch');
    up.cancelAll();
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'cancelled', 'cancelled', 10_000);
    expect((await openai.batches.retrieve(batch.id)).request_counts).toEqual({ total: 2, completed: 1, failed: 0 });
    const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges.map((e) => e.id)).toEqual([`${batch.id}:p`]);
    await eventually(async () => (await gw.stores.billing.wallet(ACCOUNT)).held === before.held, 'the rest released');
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(before.balance - LINE_COST);
  });

  it('failed upstream: the batch fails with the upstream’s reasons, each naming the client’s line', async () => {
    const batch = await submit(['', line('r', 'one'), line('s', 'two')]);
    await eventually(() => up.batches.some((x) => x.status === 'in_progress'), 'the upstream batch');
    up.failAll([{ code: 'invalid_request', message: 'Line 2 names no messages.', line: 2, param: 'body.messages' }]);
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'failed', 'failed', 10_000);
    // The upstream's line 2 is the batch's second line, the client's line 3 (a blank line first).
    expect((await openai.batches.retrieve(batch.id)).errors?.data).toEqual([{ code: 'invalid_request', message: 'Line 2 names no messages.', line: 3, param: 'body.messages' }]);
    await eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0, 'every line hold released');
  });
});

describe('an upstream batch, read back and routed with care', () => {
  it('an upstream that refuses the upload fails the batch without its words reaching the client (its key among them)', async () => {
    up.refuseUploads = `Incorrect API key provided: ${UPSTREAM_API_KEY}.`;
    try {
      const batch = await submit([line('k1', 'one')]);
      await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'failed', 'failed', 10_000);
      const failed = await openai.batches.retrieve(batch.id);
      expect(failed.errors?.data?.[0]?.code).toBe('batch_failed');
      const message = failed.errors?.data?.[0]?.message ?? '';
      expect(message).not.toBe('');
      expect(JSON.stringify(failed)).not.toContain(UPSTREAM_API_KEY);
      expect(message).not.toContain('Incorrect API key');
    } finally {
      up.refuseUploads = null;
    }
  });

  it('a failed read of the finished output is retried: every answered line is billed once, none released', async () => {
    const before = await gw.stores.billing.wallet(ACCOUNT);
    const count = up.batches.length;
    const batch = await submit([line('r1', 'one'), line('r2', 'two')]);
    await eventually(() => up.batches.length === count + 1, 'the upstream batch');
    up.failContentReads = 2;
    up.finish();
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'completed', 'completed', 10_000);
    expect(up.failContentReads).toBe(0);
    const done = await openai.batches.retrieve(batch.id);
    expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
    const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges.map((e) => e.id).sort()).toEqual([`${batch.id}:r1`, `${batch.id}:r2`]);
    expect(await gw.stores.billing.wallet(ACCOUNT)).toEqual({ balance: before.balance - 2n * LINE_COST, held: 0n });
  });

  it('its key disabled while the upstream batch runs: the upstream batch is cancelled, the batch fails and holds nothing', async () => {
    const before = await gw.stores.billing.wallet(ACCOUNT);
    const batch = await submit([line('kd1', 'one'), line('kd2', 'two')]);
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'in_progress' && up.batches.some((b) => b.status === 'in_progress'), 'the upstream batch');
    const upstreamBatch = up.batches[up.batches.length - 1]!;
    const devId = (await gw.gateway.admin.listKeys(ACCOUNT)).find((k) => k.kind === 'developer')!.id;
    await gw.gateway.admin.disableKey(devId);
    try {
      await eventually(async () => (await gw.stores.batches.getBatch(ACCOUNT, batch.id))?.status === 'failed', 'failed', 10_000);
      expect((await gw.stores.batches.getBatch(ACCOUNT, batch.id))!.errors![0]!.code).toBe('key_disabled');
      await eventually(() => up.calls.includes(`POST /batches/${upstreamBatch.id}/cancel`), 'the upstream batch cancelled');
      await eventually(async () => (await gw.stores.billing.wallet(ACCOUNT)).held === before.held, 'its holds released');
      // What the upstream ran before the cancel is billed (once each); the rest is released.
      const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
      expect(charges.length).toBeLessThan(2);
      expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(before.balance - BigInt(charges.length) * LINE_COST);
    } finally {
      await gw.gateway.admin.enableKey(devId);
    }
  });

  it('with an input guardrail configured the lines run through the gateway (redacted), not as an upstream batch', async () => {
    const guarded = await startBatchUpstream();
    const setup = testConfig({ limits: { jobPollIntervalMs: 20 } });
    setup.options.upstreams = { test: { baseUrl: guarded.url, apiKey: UPSTREAM_API_KEY, batch: true } };
    setup.options.guardrails = [{ id: 'pii', kind: 'pii', on: ['input'], action: 'redact' }];
    const g = await startGateway(setup.options);
    try {
      const client = new OpenAI({ apiKey: setup.devKey, baseURL: g.baseURL, maxRetries: 0 });
      const file = await client.files.create({ file: await toFile(Buffer.from(line('p', 'Mail jane.doe@example.com')), 'in.jsonl'), purpose: 'batch' });
      const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await eventually(async () => (await client.batches.retrieve(batch.id)).status === 'completed', 'completed', 10_000);
      expect(guarded.batches).toHaveLength(0);
      expect(guarded.chats).toHaveLength(1);
      expect(JSON.stringify(guarded.chats[0])).not.toContain('jane.doe@example.com');
      expect(JSON.stringify(guarded.chats[0])).toContain('[REDACTED:EMAIL]');
    } finally {
      await g.close();
      await guarded.close();
    }
  });
});

function l2(l: Record<string, unknown>): Record<string, unknown> {
  return l.body as Record<string, unknown>;
}
