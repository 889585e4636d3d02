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

describe('an upstream batch whose model left the catalog while its owner was down', () => {
  const OTHER = 'test/other';
  const PRICING = { prompt: '0.000001', completion: '0.000002', batch: { prompt: '0.0000005', completion: '0.000001' } };

  /**
   * Creates a batch of two lines on each of MODEL and OTHER on an upstream with a Batch API,
   * kills its owner once the upstream batch runs, and has a process whose catalog lists only
   * `kept` adopt it (the upstream batch answered by then, still running, or failed). Returns the finished batch, its output and error lines, the charges and
   * the wallet.
   */
  async function adoptedWithout(name: string, kept: string[], upstreamEnd: 'answered' | 'running' | 'failed' = 'answered') {
    const up = await startBatchUpstream();
    const key = testKey();
    const path = join(dir, `${name}.db`);
    const config = (models: string[]) =>
      writeConfig({
        upstreams: { test: { baseUrl: up.url, apiKey: 'upstream-key', timeoutMs: 60_000, batch: true } },
        models: models.map((id) => ({ id, upstream: 'test', pricing: PRICING })),
        accounts: [{ id: ACCOUNT, walletUsd: 100 }],
        keys: [{ key, account: ACCOUNT }],
        limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000, inFlightLeaseTtlMs: 1_000, jobPollIntervalMs: 50 },
        storage: { driver: 'sqlite', path },
        settleJournalDir: join(dir, `journal-${name}`),
      });
    const first = await startGatewayProcess(config([MODEL, OTHER]));
    let second: Awaited<ReturnType<typeof startGatewayProcess>> | undefined;
    try {
      const a = new OpenAI({ apiKey: key, baseURL: first.baseURL, maxRetries: 0 });
      const lines = [
        ['m1', MODEL],
        ['o1', OTHER],
        ['m2', MODEL],
        ['o2', OTHER],
      ].map(([id, model]) => JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model, max_tokens: 20, messages: [{ role: 'user', content: id }] } }));
      const input = await a.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
      const batch = await a.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      // The upstream batch is created, recorded and polled: then its owner dies, and the
      // catalog changes before the next process starts.
      await eventually(() => up.calls.some((c) => c.startsWith('GET /batches/batch_up_')), 'the upstream batch polled');
      expect(up.inputs[0]!.map((l) => l.custom_id)).toEqual(['m1', 'o1', 'm2', 'o2']);
      await first.kill('SIGKILL');
      if (upstreamEnd === 'answered') up.finish();
      // The upstream's line 2 is the client's line 2 (o1): the process reading it sends only m1 and m2 now.
      if (upstreamEnd === 'failed') up.failAll([{ code: 'bad_line', message: 'this line is bad', line: 2, param: null }]);

      second = await startGatewayProcess(config(kept));
      const b = new OpenAI({ apiKey: key, baseURL: second.baseURL, maxRetries: 0 });
      await eventually(async () => ['completed', 'failed'].includes((await b.batches.retrieve(batch.id)).status), 'finished by the second process', 20_000);
      const done = await b.batches.retrieve(batch.id);
      const read = async (id: string | null | undefined) =>
        id ? ((await (await b.files.content(id)).text()).trim().split('\n').map((l) => JSON.parse(l)) as { custom_id: string; response: { status_code: number; body: any } | null }[]) : [];
      return { done, output: await read(done.output_file_id), errors: await read(done.error_file_id), up, batchErrors: done.errors?.data ?? [] };
    } finally {
      await second?.kill();
      await first.kill('SIGKILL');
      await up.close();
    }
  }

  async function books(name: string) {
    const stores = await createStores({ driver: 'sqlite', path: join(dir, `${name}.db`) });
    try {
      const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => /:[mo]\d$/.test(e.id));
      const wallet = await stores.billing.wallet(ACCOUNT);
      const audit = await auditBooks(stores, { account: ACCOUNT });
      return { charges, wallet, differences: audit.differences };
    } finally {
      await stores.close();
    }
  }

  it('bills and hands over the lines whose model is still listed; the others fail on their own, unbilled', async () => {
    const { done, output, errors } = await adoptedWithout('model-removed', [MODEL]);
    // Not the whole batch failed for two lines: the answered lines of the kept model are the client's.
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 4, completed: 2, failed: 2 });
    expect(output.map((l) => [l.custom_id, l.response?.status_code, l.response?.body.model])).toEqual([
      ['m1', 200, MODEL],
      ['m2', 200, MODEL],
    ]);
    // A line of the removed model reads as the same call made now: the model is not found.
    expect(errors.map((l) => [l.custom_id, l.response?.status_code, l.response?.body.error.code])).toEqual([
      ['o1', 404, 'model_not_found'],
      ['o2', 404, 'model_not_found'],
    ]);
    const { charges, wallet, differences } = await books('model-removed');
    expect(charges.map((e) => [e.id.split(':').at(-1), e.cost])).toEqual([
      ['m1', LINE_COST],
      ['m2', LINE_COST],
    ]);
    // What the removed model's lines held went back: only the two billed lines were spent.
    expect(wallet).toEqual({ balance: parsePrice('100') / 1000n - 2n * LINE_COST, held: 0n });
    expect(differences).toEqual([]);
  }, 90_000);

  it('an upstream batch that failed names the client’s lines, as the upstream was sent them', async () => {
    const { done, errors, batchErrors } = await adoptedWithout('model-removed-failed', [MODEL], 'failed');
    expect(done.status).toBe('failed');
    expect(batchErrors).toEqual([{ code: 'bad_line', message: 'this line is bad', line: 2, param: null }]);
    expect(errors.map((l) => [l.custom_id, l.response?.status_code])).toEqual([
      ['o1', 404],
      ['o2', 404],
    ]);
    const { charges, wallet, differences } = await books('model-removed-failed');
    expect(charges).toEqual([]);
    expect(wallet).toEqual({ balance: parsePrice('100') / 1000n, held: 0n });
    expect(differences).toEqual([]);
  }, 90_000);

  it('with no line left to read back, cancels the upstream batch and releases every hold', async () => {
    const { done, output, errors, up: upstream } = await adoptedWithout('all-removed', ['test/unrelated'], 'running');
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 4, completed: 0, failed: 4 });
    expect(output).toEqual([]);
    expect(errors.map((l) => [l.custom_id, l.response?.status_code])).toEqual([
      ['m1', 404],
      ['o1', 404],
      ['m2', 404],
      ['o2', 404],
    ]);
    // Nobody will read the upstream batch's answers: it was asked to stop.
    expect(upstream.calls.filter((c) => /^POST \/batches\/.+\/cancel$/.test(c))).toHaveLength(1);
    const { charges, wallet, differences } = await books('all-removed');
    expect(charges).toEqual([]);
    expect(wallet).toEqual({ balance: parsePrice('100') / 1000n, held: 0n });
    expect(differences).toEqual([]);
  }, 90_000);
});

describe('the holds of a batch', () => {
  const HOLD_TTL_MS = 2_000;
  const config = (upstreamUrl: string, key: string, name: string, batch: boolean) =>
    writeConfig({
      upstreams: { test: { baseUrl: upstreamUrl, apiKey: 'upstream-key', timeoutMs: 60_000, batch } },
      models: [{ id: MODEL, upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002', batch: { prompt: '0.0000005', completion: '0.000001' } } }],
      accounts: [{ id: ACCOUNT, walletUsd: 1_000 }],
      keys: [{ key, account: ACCOUNT }],
      limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000, inFlightLeaseTtlMs: 1_000, jobPollIntervalMs: 50, holdTtlMs: HOLD_TTL_MS },
      storage: { driver: 'sqlite', path: join(dir, `${name}.db`) },
      settleJournalDir: join(dir, `journal-${name}`),
    });
  const heldOf = async (client: OpenAI) => ((await client.get('/key')) as { data: { wallet: { held: number } } }).data.wallet.held;
  const chatLines = (n: number) =>
    Array.from({ length: n }, (_, i) => JSON.stringify({ custom_id: `h${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 20, messages: [{ role: 'user', content: `line ${i}` }] } }));

  it('last the batch’s window once it is recorded, past the hold TTL', async () => {
    const up = await startBatchUpstream();
    const key = testKey();
    const gw = await startGatewayProcess(config(up.url, key, 'holds-kept', true));
    try {
      const client = new OpenAI({ apiKey: key, baseURL: gw.baseURL, maxRetries: 0 });
      const input = await client.files.create({ file: await toFile(Buffer.from(chatLines(3).join('\n')), 'in.jsonl'), purpose: 'batch' });
      await client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      const held = await heldOf(client);
      expect(held).toBeGreaterThan(0);
      // The upstream batch is still running well past the hold TTL: what its lines hold is still held.
      await new Promise((r) => setTimeout(r, HOLD_TTL_MS * 2));
      expect(up.batches[0]?.status).toBe('in_progress');
      expect(await heldOf(client)).toBe(held);
    } finally {
      await gw.kill('SIGKILL');
      await up.close();
    }
  }, 60_000);

  it('placed by a process killed before it recorded the batch lapse within the hold TTL', async () => {
    const up = await startTestUpstream();
    const key = testKey();
    const name = 'holds-orphaned';
    const file = config(up.url, key, name, false);
    const gw = await startGatewayProcess(file);
    try {
      const client = new OpenAI({ apiKey: key, baseURL: gw.baseURL, maxRetries: 0 });
      // Enough lines that placing their holds takes a while: the process dies part way.
      const input = await client.files.create({ file: await toFile(Buffer.from(chatLines(50_000).join('\n')), 'in.jsonl'), purpose: 'batch' });
      const creating = client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).catch((err: unknown) => err);
      await eventually(async () => (await heldOf(client)) > 0, 'holds being placed', 30_000);
      await gw.kill('SIGKILL');
      expect(await creating).toBeInstanceOf(Error);
    } finally {
      await gw.kill('SIGKILL');
      await up.close();
    }
    const stores = await createStores({ driver: 'sqlite', path: join(dir, `${name}.db`) });
    try {
      // No batch was recorded to release them: they hold money now, and lapse on their own.
      expect(await stores.batches.unfinishedBatches()).toEqual([]);
      expect((await stores.billing.wallet(ACCOUNT)).held).toBeGreaterThan(0n);
      await eventually(async () => (await stores.billing.wallet(ACCOUNT)).held === 0n, 'the holds lapsed', HOLD_TTL_MS * 3);
      expect(await chargesOf(stores.billing.ledger(ACCOUNT))).toEqual([]);
      expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
    } finally {
      await stores.close();
    }
  }, 120_000);
});
