/**
 * The key that created a batch, disabled while its lines run: no line starts after that (as
 * the key could make no more calls), the batch ends failed naming why, the lines that ran are
 * billed once, and what the others held is released.
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { closedAfterAll, createChatBatch } from '../helpers/batches.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const keep = closedAfterAll();

describe('a batch whose key is disabled while it runs', () => {
  it('runs no more lines, ends failed with key_disabled, bills the lines that ran and releases the rest', async () => {
    const up = await startTestUpstream();
    keep(up);
    // Each answer takes 100 ms.
    up.setBehavior(() => ({ kind: 'json', usage: { prompt_tokens: 11, completion_tokens: 7 }, gate: new Promise((r) => setTimeout(r, 100)) }));
    const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 1 } });
    const gw = await startGateway(setup.options);
    keep(gw);
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const ids = Array.from({ length: 30 }, (_, i) => `k${i}`);
    const { batch } = await createChatBatch(openai, MODEL, ids);
    await up.waitForRequests(2);
    const devId = (await gw.gateway.admin.listKeys(ACCOUNT)).find((k) => k.kind === 'developer')!.id;
    await gw.gateway.admin.disableKey(devId);

    await eventually(async () => (await gw.stores.batches.getBatch(ACCOUNT, batch.id))?.status === 'failed', 'the batch failed', 10_000);
    const done = await gw.stores.batches.getBatch(ACCOUNT, batch.id);
    expect(done!.errors).toEqual([{ code: 'key_disabled', message: 'The key that created the batch was disabled.', line: null, param: null }]);
    // It stopped well before its end: a line takes 100 ms, and the key is looked at every 500 ms.
    const ran = up.requests.length;
    expect(ran).toBeLessThan(ids.length);
    await eventually(async () => (await gw.stores.billing.wallet(ACCOUNT)).held === 0n, 'every hold released', 10_000);
    const charges = (await chargesOf(gw.stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges).toHaveLength(ran);
    expect((await auditBooks(gw.stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 30_000);
});
