/**
 * Batches on every driver (memory, SQLite, PostgreSQL, Redis), against a loopback upstream:
 * each line billed once at the batch price to the key that created the batch, and a cancel
 * mid-run that lets the running lines finish (billed) and releases what the rest held.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, POSTGRES_URL } from '../../bench/postgres-util.js';
import { deleteKeysWithPrefix, REDIS_URL } from '../../bench/redis-util.js';
import { auditBooks } from '../../src/billing/audit.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import { createStores } from '../../src/stores/from-storage.js';
import type { Stores } from '../../src/stores/types.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const BATCH_PROMPT = '0.0000005';
const BATCH_COMPLETION = '0.000001';
const LINE_COST = costOf([
  [parsePrice(BATCH_PROMPT), 11],
  [parsePrice(BATCH_COMPLETION), 7],
]);

const dir = mkdtempSync(join(tmpdir(), 'mg-batches-'));
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups) await c();
  rmSync(dir, { recursive: true, force: true });
});

const drivers: Record<string, () => Promise<Stores>> = {
  memory: async () => (await import('../../src/stores/memory/index.js')).createMemoryStores(),
  sqlite: () => createStores({ driver: 'sqlite', path: join(dir, `${Math.random().toString(36).slice(2)}.db`) }),
  postgres: async () => {
    const schema = freshSchema('mgbatch');
    cleanups.push(() => dropSchema(schema));
    return createStores({ driver: 'postgres', url: POSTGRES_URL, schema });
  },
  redis: async () => {
    const keyPrefix = `mgbatch${Math.random().toString(36).slice(2)}:`;
    cleanups.push(async () => {
      const r = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(r, keyPrefix);
      r.disconnect();
    });
    return createStores({ driver: 'redis', url: REDIS_URL, keyPrefix });
  },
};

function chatLine(i: number) {
  return JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 20, messages: [{ role: 'user', content: `line ${i}` }] } });
}

describe('a batch past its completion window', () => {
  it('expires: the lines running finish and are billed, the rest are in the error file as batch_expired, their holds released', async () => {
    const up = await startTestUpstream();
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    up.setBehavior({ kind: 'json', usage: { prompt_tokens: 11, completion_tokens: 7 }, gate });
    let t = Date.now();
    const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 2 }, now: () => t });
    (setup.options.models![0]!.pricing as Record<string, unknown>).batch = { prompt: BATCH_PROMPT, completion: BATCH_COMPLETION };
    const gw = await startGateway(setup.options);
    try {
      const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
      const before = await gw.stores.billing.wallet(ACCOUNT);
      const file = await openai.files.create({ file: await toFile(Buffer.from(Array.from({ length: 5 }, (_, i) => chatLine(i)).join('\n')), 'in.jsonl'), purpose: 'batch' });
      const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await up.waitForRequests(2);
      // A day passes while the first two lines run.
      t += 24 * 60 * 60 * 1000 + 1000;
      open();
      await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'expired', 'expired', 10_000);
      const done = await openai.batches.retrieve(batch.id);
      expect(done.request_counts).toEqual({ total: 5, completed: 2, failed: 3 });
      expect(up.requests).toHaveLength(2);
      const errors = (await (await openai.files.content(done.error_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
      expect(errors.map((l) => [l.custom_id, l.error.code])).toEqual([2, 3, 4].map((i) => [`req-${i}`, 'batch_expired']));
      const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
      expect(charges).toHaveLength(2);
      expect(await gw.stores.billing.wallet(ACCOUNT)).toEqual({ balance: before.balance - 2n * LINE_COST, held: 0n });
    } finally {
      await gw.close();
      await up.close();
    }
  }, 30_000);
});

for (const [name, make] of Object.entries(drivers)) {
  describe(`batches on ${name}`, () => {
    it('bills each line once at the batch price; a cancel mid-run bills what ran and releases the rest', async () => {
      const up = await startTestUpstream();
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      // The first two lines answer at once; the next two wait for the gate (they run when the cancel comes).
      up.setBehavior((_rec, i) => ({ kind: 'json', usage: { prompt_tokens: 11, completion_tokens: 7 }, ...(i >= 2 ? { gate } : {}) }));
      const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 2 } });
      (setup.options.models![0]!.pricing as Record<string, unknown>).batch = { prompt: BATCH_PROMPT, completion: BATCH_COMPLETION };
      const stores = await make();
      const gw = await startGateway({ ...setup.options, stores });
      try {
        const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
        const before = await stores.billing.wallet(ACCOUNT);
        const file = await openai.files.create({ file: await toFile(Buffer.from(Array.from({ length: 10 }, (_, i) => chatLine(i)).join('\n')), 'in.jsonl'), purpose: 'batch' });
        const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
        // While it runs, the batch's worst case is held.
        expect((await stores.billing.wallet(ACCOUNT)).held).toBeGreaterThan(0n);
        await up.waitForRequests(4);
        // Two lines billed, each settling its own hold: the batch holds the other eight lines' worst cases, no more.
        await eventually(async () => (await openai.batches.retrieve(batch.id)).request_counts?.completed === 2, 'two lines billed');
        const first = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
        expect(first).toHaveLength(2);
        expect(first[0]!.held).toBeGreaterThan(LINE_COST);
        expect(first[0]!.exceededHold).toBe(false);
        expect((await stores.billing.wallet(ACCOUNT)).held).toBe(8n * first[0]!.held);
        const cancelling = await openai.batches.cancel(batch.id);
        expect(cancelling.status).toBe('cancelling');
        open();
        await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'cancelled', 'cancelled', 10_000);
        const done = await openai.batches.retrieve(batch.id);
        expect(done.request_counts).toEqual({ total: 10, completed: 4, failed: 0 });
        expect(up.requests).toHaveLength(4);
        const output = (await (await openai.files.content(done.output_file_id!)).text()).trim().split('\n');
        expect(output.map((l) => JSON.parse(l).custom_id)).toEqual(['req-0', 'req-1', 'req-2', 'req-3']);
        for (const l of output) expect(JSON.parse(l).response.body.model).toBe(MODEL);

        const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
        expect(charges.map((e) => e.id).sort()).toEqual([0, 1, 2, 3].map((i) => `${batch.id}:req-${i}`));
        for (const e of charges) {
          expect(e.cost).toBe(LINE_COST);
          expect(e.keyId).toBe((await stores.keys.listByAccount(ACCOUNT)).find((k) => k.kind === 'developer')!.id);
        }
        const after = await stores.billing.wallet(ACCOUNT);
        expect(after).toEqual({ balance: before.balance - 4n * LINE_COST, held: 0n });
        expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
      } finally {
        await gw.close();
        await up.close();
      }
    }, 30_000);

    it('a line billed before a crash (its outcome never recorded) runs again and is not billed again', async () => {
      const up = await startTestUpstream();
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      up.setBehavior({ kind: 'json', usage: { prompt_tokens: 11, completion_tokens: 7 }, gate });
      const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 2 } });
      (setup.options.models![0]!.pricing as Record<string, unknown>).batch = { prompt: BATCH_PROMPT, completion: BATCH_COMPLETION };
      const stores = await make();
      const gw = await startGateway({ ...setup.options, stores });
      try {
        const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
        const file = await openai.files.create({ file: await toFile(Buffer.from(Array.from({ length: 3 }, (_, i) => chatLine(i)).join('\n')), 'in.jsonl'), purpose: 'batch' });
        const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
        // What an instance that died after billing req-0, before recording it, left: its charge.
        const key = (await stores.keys.listByAccount(ACCOUNT)).find((k) => k.kind === 'developer')!;
        const earlier = 12_345n;
        const entry = { id: `${batch.id}:req-0`, accountId: ACCOUNT, keyId: key.id, model: MODEL, units: { kind: 'tokens' as const, prompt: 1, completion: 1 }, measured: 'usage' as const, at: Date.now() };
        await stores.billing.settle({ holdId: entry.id, accountId: ACCOUNT, month: new Date().toISOString().slice(0, 7), cost: earlier, entry });
        open();
        await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'completed', 'completed', 10_000);
        expect(up.requests).toHaveLength(3);
        const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
        expect(charges.map((e) => [e.id, e.cost]).sort()).toEqual([
          [`${batch.id}:req-0`, earlier],
          [`${batch.id}:req-1`, LINE_COST],
          [`${batch.id}:req-2`, LINE_COST],
        ]);
        expect((await stores.billing.wallet(ACCOUNT)).held).toBe(0n);
        expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
      } finally {
        await gw.close();
        await up.close();
      }
    }, 30_000);
  });
}
