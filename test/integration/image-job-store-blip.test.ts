/**
 * An image job whose store refuses its end for a moment (an outage as the images arrive): the
 * charge lands (journaled if need be) and the images are written once the store takes them.
 * Before, the one write of the job's end was not tried again: the job stayed unfinished, was
 * adopted as lost ("nothing was charged") while it had been charged, and its images were gone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, makeGateway, testConfig } from '../helpers/gateway.js';
import { IMAGE, imageCost, mediaModels } from '../helpers/media.js';

let gateway: Gateway;
let stores: Stores;
let devKey: string;
/** How many writes of a job's end the store refuses next. */
let endsRefused = 0;

beforeAll(async () => {
  stores = createMemoryStores();
  const update = stores.jobs.update.bind(stores.jobs);
  stores.jobs.update = async (id, patch, when) => {
    if ((patch.status === 'completed' || patch.status === 'failed') && endsRefused > 0) {
      endsRefused--;
      throw new StoreUnavailableError('store unreachable (test)');
    }
    return update(id, patch, when);
  };
  const setup = testConfig({
    walletUsd: 100,
    models: mediaModels('slow'),
    limits: { inlineImageDeadlineMs: 100, jobPollIntervalMs: 50, inFlightLeaseTtlMs: 600 },
  });
  setup.options.upstreams = { test: { simulate: true, imageDelayMs: 0, videoDurationMs: 150, chunkDelayMs: 0 }, slow: { simulate: true, imageDelayMs: 400, videoDurationMs: 150, chunkDelayMs: 0 } };
  devKey = setup.devKey;
  ({ gateway } = await makeGateway({ ...setup.options, stores }));
});
afterAll(async () => {
  await gateway?.dispose();
});

const api = (path: string, body?: unknown) =>
  Promise.resolve(
    gateway.fetch(
      new Request(`http://gw.test/v1${path}`, {
        method: body === undefined ? 'GET' : 'POST',
        headers: { authorization: `Bearer ${devKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
      { clientAddress: '192.0.2.1' },
    ),
  );

describe('an image job whose end the store refuses for a moment', () => {
  it('is written completed with its images once the store takes it, charged once; never adopted as lost', async () => {
    endsRefused = 3;
    const res = await api('/images/generations', { model: IMAGE, prompt: 'a red kite', n: 1, size: '1280x720' });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    let job: Record<string, unknown> = {};
    await eventually(
      async () => {
        job = (await (await api(`/images/${id}`)).json()) as Record<string, unknown>;
        return job.status !== 'in_progress';
      },
      'the job to end',
      10_000,
    );
    expect(job).toMatchObject({ status: 'completed', error: null });
    expect((job.result as { data: unknown[] }).data).toHaveLength(1);
    expect(endsRefused).toBe(0);
    const entries = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id === id);
    expect(entries).toHaveLength(1);
    expect(entries[0]!.cost).toBe(imageCost('720P', 1));
  }, 15_000);
});
