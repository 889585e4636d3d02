/**
 * A batch whose run fails part way. A store that did not answer decides nothing: the lines in
 * flight end, and a later sweep runs the lines not yet recorded, each billed once. Any other
 * failure fails the batch, but only once no line of it is running, and what its lines still
 * hold is released even when the run failed before it read its input. A batch cancelled
 * before its upstream batch was created creates none.
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { BatchLine, Stores } from '../../src/stores/types.js';
import { closedAfterAll, createChatBatch } from '../helpers/batches.js';
import { startBatchUpstream } from '../helpers/batch-upstream.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig, UPSTREAM_API_KEY } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const keep = closedAfterAll();

/**
 * Has the batch run's read of its input (the second read of it: the first is the creation's)
 * wait for `first`, or fail with it.
 */
function atTheRunsRead(stores: Stores, first: () => Promise<void>): void {
  const fileContent = stores.batches.fileContent.bind(stores.batches);
  let reads = 0;
  stores.batches.fileContent = async (account, id) => {
    if (++reads === 2) await first();
    return fileContent(account, id);
  };
}

/** Has the store refuse to record a line when `refuse` says so (an outage, or a statement it refuses). */
function refusingLines(stores: Stores, refuse: (line: BatchLine) => boolean): void {
  const addLine = stores.batches.addLine.bind(stores.batches);
  stores.batches.addLine = async (account, batchId, line) => {
    if (refuse(line)) throw new StoreUnavailableError('the store did not take the record');
    return addLine(account, batchId, line);
  };
}

const lineIds = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { custom_id: string }).custom_id);

describe('a batch whose run fails', () => {
  it('the store not taking a line’s record: the batch goes on at a later sweep, each line recorded and billed once', async () => {
    const up = await startTestUpstream();
    keep(up);
    up.setBehavior({ kind: 'json', gate: new Promise((r) => setTimeout(r, 50)) });
    const stores = createMemoryStores();
    let failed = false;
    refusingLines(stores, (line) => line.customId === 'f2' && !failed && (failed = true));
    const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 2, inFlightLeaseTtlMs: 300 } });
    const gw = await startGateway({ ...setup.options, stores });
    keep(gw);
    const balance = (await stores.billing.wallet(ACCOUNT)).balance;
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const ids = ['f1', 'f2', 'f3', 'f4', 'f5', 'f6'];
    const { batch } = await createChatBatch(openai, MODEL, ids);
    await eventually(async () => ['completed', 'failed'].includes((await openai.batches.retrieve(batch.id)).status), 'the batch ended', 10_000);
    const done = await openai.batches.retrieve(batch.id);
    expect(failed).toBe(true);
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
    expect(lineIds(await (await openai.files.content(done.output_file_id!)).text())).toEqual(ids);
    // The line whose record was lost ran again (upstream twice), and is charged once.
    expect(up.requests).toHaveLength(7);
    const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges.map((e) => e.id).sort()).toEqual(ids.map((id) => `${batch.id}:${id}`));
    expect(await stores.billing.wallet(ACCOUNT)).toEqual({ balance: balance - charges.reduce((s, e) => s + e.cost, 0n), held: 0n });
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 30_000);

  it('a store failing every time: the batch waits longer each time, and a cancel ends it at once', async () => {
    const up = await startTestUpstream();
    keep(up);
    const stores = createMemoryStores();
    let refused = 0;
    // One line's record is refused every time (a statement the store refuses, not an outage).
    refusingLines(stores, (line) => line.customId === 'w2' && ++refused > 0);
    // Sweeps every second: the waits after each failure are 1, 2, 4, 8 s.
    const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 1, inFlightLeaseTtlMs: 3_000 } });
    const gw = await startGateway({ ...setup.options, stores });
    keep(gw);
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const { batch } = await createChatBatch(openai, MODEL, ['w1', 'w2', 'w3']);
    await eventually(() => refused >= 3, 'three runs refused', 15_000);
    const runs = up.requests.length;
    expect(await openai.batches.cancel(batch.id)).toMatchObject({ status: 'cancelling' });
    // The next sweep runs it to its end, not the 4 or 8 s wait.
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'cancelled', 'cancelled without waiting', 2_500);
    expect(up.requests.length).toBe(runs);
    await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'every line hold released');
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 40_000);

  it('failing before its input was read: the batch fails and every line’s hold is released', async () => {
    const up = await startTestUpstream();
    keep(up);
    const stores = createMemoryStores();
    atTheRunsRead(stores, async () => {
      throw new Error('the record could not be read');
    });
    const setup = testConfig({ upstreamUrl: up.url });
    const gw = await startGateway({ ...setup.options, stores });
    keep(gw);
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const { batch } = await createChatBatch(openai, MODEL, ['g1', 'g2', 'g3']);
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'failed', 'the batch failed', 10_000);
    expect((await openai.batches.retrieve(batch.id)).errors?.data?.[0]).toMatchObject({ code: 'batch_failed' });
    await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'every line hold released', 5_000);
    expect((await stores.billing.wallet(ACCOUNT)).held).toBe(0n);
    expect(up.requests).toHaveLength(0);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 30_000);

  it('cancelled before its upstream batch was created: none is created', async () => {
    const up = await startBatchUpstream();
    keep(up);
    const stores = createMemoryStores();
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    // The run reads the input only once the cancel is in.
    atTheRunsRead(stores, () => gate);
    const setup = testConfig({ limits: { jobPollIntervalMs: 20 } });
    setup.options.upstreams = { test: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, batch: true } };
    const gw = await startGateway({ ...setup.options, stores });
    keep(gw);
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const { batch } = await createChatBatch(openai, MODEL, ['c1', 'c2']);
    expect((await openai.batches.cancel(batch.id)).status).toBe('cancelling');
    open();
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'cancelled', 'the batch cancelled', 10_000);
    expect(up.calls.filter((c) => c.startsWith('POST'))).toEqual([]);
    await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'every line hold released', 5_000);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 30_000);

  it('holds that take longer to place than the hold TTL are all still held when the batch is created', async () => {
    const up = await startBatchUpstream();
    keep(up);
    const stores = createMemoryStores();
    // A slow store: placing every line's hold takes about twice the hold TTL.
    const placeHold = stores.billing.placeHold.bind(stores.billing);
    stores.billing.placeHold = async (req) => {
      await new Promise((r) => setTimeout(r, 25));
      return placeHold(req);
    };
    const setup = testConfig({ limits: { holdTtlMs: 300, jobPollIntervalMs: 20 } });
    setup.options.upstreams = { test: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, batch: true } };
    const gw = await startGateway({ ...setup.options, stores });
    keep(gw);
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const ids = Array.from({ length: 3_000 }, (_, i) => `s${i}`);
    const started = Date.now();
    const { batch } = await createChatBatch(openai, MODEL, ids);
    expect(Date.now() - started).toBeGreaterThan(600);
    // None lapsed while the others were placed: the first ones were renewed meanwhile.
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(ids.length);
    await openai.batches.cancel(batch.id);
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'cancelled', 'the batch cancelled', 10_000);
    await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'every line hold released', 10_000);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 60_000);

  it('a store failing part way through the holds: the batch is refused and no hold is left behind', async () => {
    const stores = createMemoryStores();
    // A slow store that fails the 300th hold: the holds placed around it are all released.
    const placeHold = stores.billing.placeHold.bind(stores.billing);
    let n = 0;
    stores.billing.placeHold = async (req) => {
      await new Promise((r) => setTimeout(r, 5));
      if (++n === 300) throw new StoreUnavailableError('the store did not answer');
      return placeHold(req);
    };
    const setup = testConfig({});
    const gw = await startGateway({ ...setup.options, stores });
    keep(gw);
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const ids = Array.from({ length: 2_000 }, (_, i) => `p${i}`);
    await expect(createChatBatch(openai, MODEL, ids)).rejects.toMatchObject({ status: 503 });
    // Nothing is still being placed once the refusal is out: none is held, now or later.
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
    const placed = n;
    await new Promise((r) => setTimeout(r, 200));
    expect(n).toBe(placed);
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
    expect(await stores.batches.unfinishedBatches()).toEqual([]);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 60_000);
});
