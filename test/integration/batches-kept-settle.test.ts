/**
 * A batch line whose settle the store refused for a moment (kept in the settle journal, tried
 * again shortly) while the batch ended. The batch's end releases what its lines hold; before,
 * that release closed the line's hold id before the kept settle landed, and the store then took
 * the settle as a late one for a closed hold: the answer was in the output file, the ledger had
 * no charge for it, and the audit saw nothing wrong.
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { closedAfterAll, createChatBatch } from '../helpers/batches.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const keep = closedAfterAll();

describe('a batch line whose settle is kept when the batch ends', () => {
  it('is charged once when its settle lands: the batch end does not release its hold first', async () => {
    const up = keep(await startTestUpstream());
    up.setBehavior({ kind: 'json', usage: { prompt_tokens: 11, completion_tokens: 7 } });
    const stores = createMemoryStores();
    const settle = stores.billing.settle.bind(stores.billing);
    let refused = 0;
    // The store refuses the first settle of line "a" (a blip as its answer arrives).
    stores.billing.settle = async (req) => {
      if (req.holdId.endsWith(':a') && refused++ === 0) throw new StoreUnavailableError('store unreachable (test)');
      return settle(req);
    };
    // The holds the store is asked to release: a line that ran is not among them (its settle
    // closes its hold, kept or not).
    const release = stores.billing.release.bind(stores.billing);
    const released: string[] = [];
    stores.billing.release = async (accountId, holdId) => {
      released.push(holdId);
      return release(accountId, holdId);
    };
    const setup = testConfig({ upstreamUrl: up.url });
    const gw = keep(await startGateway({ ...setup.options, stores }));
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const before = await stores.billing.wallet(ACCOUNT);
    const { batch } = await createChatBatch(openai, MODEL, ['a', 'b']);
    await eventually(async () => (await openai.batches.retrieve(batch.id)).status === 'completed', 'the batch completes', 10_000);
    const done = await openai.batches.retrieve(batch.id);
    const output = (await (await openai.files.content(done.output_file_id!)).text()).trim().split('\n');
    expect(output.map((l) => JSON.parse(l).custom_id).sort()).toEqual(['a', 'b']);
    for (const l of output) expect(JSON.parse(l).response.status_code).toBe(200);
    // The kept settle lands (its retry comes within a second) and charges the line.
    await eventually(async () => (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(batch.id)).length === 2, 'both lines are charged', 5_000);
    expect(refused).toBeGreaterThan(1);
    const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(batch.id));
    expect(charges.map((e) => e.id.slice(batch.id.length)).sort()).toEqual([':a', ':b']);
    for (const e of charges) expect(e.cost).toBeGreaterThan(0n);
    const after = await stores.billing.wallet(ACCOUNT);
    expect(before.balance - after.balance).toBe(charges[0]!.cost + charges[1]!.cost);
    expect(released.filter((id) => id.startsWith(batch.id))).toEqual([]);
    expect(after.held).toBe(0n);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  });
});
