/**
 * A batch survives `kill -9` of the process running it: a real `model-gateway serve` (the
 * CLI, a child process on a SQLite file) is killed mid-batch with lines in flight; a new
 * process adopts the batch once its owner stopped renewing it, runs the lines not recorded
 * (those in flight run again), and every line is billed exactly once; the audit is clean.
 * On an upstream with a Batch API, a process killed after the upstream created the batch but
 * before the process recorded it leaves one upstream batch, not two: the next finds it by its tag,
 * trying again when the upstream's listing fails.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import { createStores } from '../../src/stores/from-storage.js';
import { chargesOf } from '../helpers/billing.js';
import { eventually, testKey } from '../helpers/gateway.js';
import { runCli, startGatewayProcess, writeConfig } from '../helpers/processes.js';
import { startBatchUpstream } from '../helpers/batch-upstream.js';
import { startTestUpstream } from '../helpers/upstream.js';

const MODEL = 'test/chat';
const ACCOUNT = 'acct_crash_batch';
const dir = mkdtempSync(join(tmpdir(), 'mg-batch-crash-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const LINE_COST = costOf([
  [parsePrice('0.0000005'), 11],
  [parsePrice('0.000001'), 7],
]);

describe('a batch and kill -9', () => {
  it('is finished by the next process, every line billed exactly once', async () => {
    const up = await startTestUpstream();
    let crashed = false;
    // Before the crash, the first three lines answer and the next ones never do.
    up.setBehavior((_rec, i) => (crashed || i < 3 ? { kind: 'json', usage: { prompt_tokens: 11, completion_tokens: 7 } } : { kind: 'hang' }));
    const key = testKey();
    const path = join(dir, 'gateway.db');
    const file = writeConfig({
      upstreams: { test: { baseUrl: up.url, apiKey: 'upstream-key', timeoutMs: 60_000 } },
      models: [{ id: MODEL, upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002', batch: { prompt: '0.0000005', completion: '0.000001' } } }],
      accounts: [{ id: ACCOUNT, walletUsd: 100 }],
      keys: [{ key, account: ACCOUNT }],
      limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000, batchConcurrency: 2, inFlightLeaseTtlMs: 1_000 },
      storage: { driver: 'sqlite', path },
      settleJournalDir: join(dir, 'journal'),
    });
    const first = await startGatewayProcess(file);
    let second: Awaited<ReturnType<typeof startGatewayProcess>> | undefined;
    try {
      const a = new OpenAI({ apiKey: key, baseURL: first.baseURL, maxRetries: 0 });
      const lines = Array.from({ length: 8 }, (_, i) =>
        JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 20, messages: [{ role: 'user', content: `line ${i}` }] } }),
      );
      const input = await a.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
      const batch = await a.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      // Three lines answered, two in flight: then the process dies.
      await up.waitForRequests(5);
      await eventually(async () => (await a.batches.retrieve(batch.id)).request_counts?.completed === 3, 'three lines recorded');
      await first.kill('SIGKILL');
      crashed = true;

      second = await startGatewayProcess(file);
      const b = new OpenAI({ apiKey: key, baseURL: second.baseURL, maxRetries: 0 });
      await eventually(async () => (await b.batches.retrieve(batch.id)).status === 'completed', 'completed by the second process', 20_000);
      const done = await b.batches.retrieve(batch.id);
      expect(done.request_counts).toEqual({ total: 8, completed: 8, failed: 0 });
      const output = (await (await b.files.content(done.output_file_id!)).text()).trim().split('\n');
      expect(output.map((l) => JSON.parse(l).custom_id)).toEqual(lines.map((_, i) => `req-${i}`));
      // The two lines in flight at the crash went upstream twice; none of the three recorded did.
      expect(up.requests).toHaveLength(10);
    } finally {
      await second?.kill();
      await first.kill('SIGKILL');
      await up.close();
    }
    // The CLI lists it, finished.
    const listed = await runCli(['batches', 'list', '--config', file, '--account', ACCOUNT]);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout).data).toMatchObject([{ status: 'completed', request_counts: { total: 8, completed: 8, failed: 0 } }]);
    const stores = await createStores({ driver: 'sqlite', path });
    try {
      const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.includes(':req-'));
      expect(charges).toHaveLength(8);
      expect(new Set(charges.map((e) => e.id)).size).toBe(8);
      for (const e of charges) expect(e.cost).toBe(LINE_COST);
      const wallet = await stores.billing.wallet(ACCOUNT);
      expect(wallet).toEqual({ balance: parsePrice('100') / 1000n - 8n * LINE_COST, held: 0n });
      expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
    } finally {
      await stores.close();
    }
  }, 90_000);
});

describe('an upstream batch and kill -9', () => {
  it('a process killed before it recorded the upstream batch it created leaves that one batch to the next, billed once', async () => {
    const up = await startBatchUpstream();
    // The upstream creates the batch, but its answer never reaches the first process.
    up.holdCreates = true;
    const key = testKey();
    const path = join(dir, 'gateway-upstream-batch.db');
    const file = writeConfig({
      upstreams: { test: { baseUrl: up.url, apiKey: 'upstream-key', timeoutMs: 60_000, batch: true } },
      models: [{ id: MODEL, upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002', batch: { prompt: '0.0000005', completion: '0.000001' } } }],
      accounts: [{ id: ACCOUNT, walletUsd: 100 }],
      keys: [{ key, account: ACCOUNT }],
      limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000, inFlightLeaseTtlMs: 1_000, jobPollIntervalMs: 50 },
      storage: { driver: 'sqlite', path },
      settleJournalDir: join(dir, 'journal-upstream-batch'),
    });
    const first = await startGatewayProcess(file);
    let second: Awaited<ReturnType<typeof startGatewayProcess>> | undefined;
    try {
      const a = new OpenAI({ apiKey: key, baseURL: first.baseURL, maxRetries: 0 });
      const lines = ['u1', 'u2', 'u3'].map((id) =>
        JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 20, messages: [{ role: 'user', content: id }] } }),
      );
      const input = await a.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
      const batch = await a.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await eventually(() => up.batches.length === 1, 'the upstream batch created');
      expect(up.batches[0]!.metadata).toEqual({ model_gateway_batch_id: batch.id });
      await first.kill('SIGKILL');
      // Others' batches came since, more than a page of the listing: it is searched past them.
      for (let i = 0; i < 150; i++) {
        up.batches.push({ ...up.batches[0]!, id: `batch_other_${i}`, status: 'completed', metadata: i % 2 ? null : { model_gateway_batch_id: `batch_${i}` } });
      }
      up.holdCreates = false;
      up.autoFinish = true;
      // The first listings fail: the next process tries again rather than create a second batch.
      up.failLists = 2;

      second = await startGatewayProcess(file);
      const b = new OpenAI({ apiKey: key, baseURL: second.baseURL, maxRetries: 0 });
      await eventually(async () => (await b.batches.retrieve(batch.id)).status === 'completed', 'completed by the second process', 20_000);
      const done = await b.batches.retrieve(batch.id);
      expect(done.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
      // One upstream batch ran the lines: the second process found the first's by its tag.
      expect(up.batches.filter((x) => !x.id.startsWith('batch_other_'))).toHaveLength(1);
      expect(up.calls.filter((c) => c === 'POST /batches')).toHaveLength(1);
      expect(up.calls.filter((c) => c.startsWith('GET /batches?'))).toHaveLength(4);
      const output = (await (await b.files.content(done.output_file_id!)).text()).trim().split('\n');
      expect(output.map((l) => JSON.parse(l).custom_id)).toEqual(['u1', 'u2', 'u3']);
    } finally {
      await second?.kill();
      await first.kill('SIGKILL');
      await up.close();
    }
    const stores = await createStores({ driver: 'sqlite', path });
    try {
      const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => /:u\d$/.test(e.id));
      expect(charges.map((e) => e.cost)).toEqual([LINE_COST, LINE_COST, LINE_COST]);
      expect(await stores.billing.wallet(ACCOUNT)).toEqual({ balance: parsePrice('100') / 1000n - 3n * LINE_COST, held: 0n });
      expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
    } finally {
      await stores.close();
    }
  }, 90_000);
});
