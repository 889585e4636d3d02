/**
 * A batch whose input file was deleted while it ran, adopted by another instance: it cannot
 * run its lines (it no longer knows them), so it fails, and what its lines still held is
 * released at once, found by their holds, rather than kept from the wallet for the rest of
 * its 24-hour window. An upstream batch running it is cancelled: nobody would read its answers.
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { closedAfterAll, createChatBatch } from '../helpers/batches.js';
import { startBatchUpstream } from '../helpers/batch-upstream.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig, UPSTREAM_API_KEY } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const keep = closedAfterAll();

describe('a batch whose input file is gone when it is adopted', () => {
  it('fails, and every hold of its lines is released', async () => {
    const up = await startTestUpstream();
    keep(up);
    // Each line takes a while: the first instance stops with one line answered, the others unrun.
    up.setBehavior({
      kind: 'custom',
      async handle(_req, res) {
        await new Promise((r) => setTimeout(r, 300));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } }));
      },
    });
    const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 1, inFlightLeaseTtlMs: 300 }, shutdownGraceMs: 200 });
    const first = await startGateway(setup.options);
    const stores = first.stores;
    const a = new OpenAI({ apiKey: setup.devKey, baseURL: first.baseURL, maxRetries: 0 });
    const { input, batch } = await createChatBatch(a, MODEL, ['d1', 'd2', 'd3']);
    await up.waitForRequests(1);
    // The first instance stops (its line in flight finishes, the batch is left to the next), and
    // the input file is deleted.
    await first.close();
    expect(await stores.billing.openHolds(ACCOUNT)).toBeGreaterThanOrEqual(2);
    expect(await stores.batches.deleteFile(ACCOUNT, input.id)).toBe(true);

    const second = await startGateway({ ...setup.options, stores });
    keep(second);
    const b = new OpenAI({ apiKey: setup.devKey, baseURL: second.baseURL, maxRetries: 0 });
    await eventually(async () => (await b.batches.retrieve(batch.id)).status === 'failed', 'failed by the second instance', 10_000);
    const done = await b.batches.retrieve(batch.id);
    expect(done.errors?.data?.[0]).toMatchObject({ code: 'input_file_deleted' });
    await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'every line hold released', 5_000);
    expect((await stores.billing.wallet(ACCOUNT)).held).toBe(0n);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 30_000);

  it('running as an upstream batch: the upstream batch is cancelled too', async () => {
    const up = await startBatchUpstream();
    keep(up);
    const setup = testConfig({ limits: { inFlightLeaseTtlMs: 300, jobPollIntervalMs: 20 }, shutdownGraceMs: 200 });
    setup.options.upstreams = { test: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, batch: true } };
    const first = await startGateway(setup.options);
    const stores = first.stores;
    const a = new OpenAI({ apiKey: setup.devKey, baseURL: first.baseURL, maxRetries: 0 });
    const { input, batch } = await createChatBatch(a, MODEL, ['e1', 'e2']);
    await eventually(async () => (await stores.batches.getBatch(ACCOUNT, batch.id))?.upstreamBatchId != null, 'the upstream batch recorded');
    await first.close();
    expect(await stores.batches.deleteFile(ACCOUNT, input.id)).toBe(true);

    const second = await startGateway({ ...setup.options, stores });
    keep(second);
    const b = new OpenAI({ apiKey: setup.devKey, baseURL: second.baseURL, maxRetries: 0 });
    await eventually(async () => (await b.batches.retrieve(batch.id)).status === 'failed', 'failed by the second instance', 10_000);
    expect(up.calls).toContain(`POST /batches/${up.batches[0]!.id}/cancel`);
    expect(up.batches.map((x) => x.status)).toEqual(['cancelled']);
    await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'every line hold released', 5_000);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 30_000);
});
