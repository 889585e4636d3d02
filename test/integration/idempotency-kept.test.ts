/**
 * Idempotency-Key: an answer the client holds whole is kept for replays first. A plain answer
 * carries content-length, so the client holds it with its last byte, before the body's end:
 * the chaos soak (chaos.test.ts) found the save running only at that end, so a client retrying
 * at once, or a kill in between, left the key unkept while the client held the answer, and the
 * retry was run and charged again. An answer whose save fails still goes out (its charge has
 * landed), its key kept in flight until a later try keeps it. Here the idempotency store's
 * save is held back (or fails) on purpose, deterministically.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let upstream: TestUpstream;
let gw: RunningGateway;
let devKey: string;
/** How the next saves behave: held until `release` runs, or refused. */
let saves: { kind: 'held'; released: Promise<void> } | { kind: 'refused' } | { kind: 'normal' } = { kind: 'normal' };

beforeAll(async () => {
  upstream = await startTestUpstream();
  upstream.setBehavior({ kind: 'json', content: 'kept answer' });
  const stores: Stores = createMemoryStores();
  const complete = stores.idempotency.complete.bind(stores.idempotency);
  stores.idempotency.complete = async (...args) => {
    const s = saves;
    if (s.kind === 'refused') throw new Error('store unreachable');
    if (s.kind === 'held') await s.released;
    return complete(...args);
  };
  const setup = testConfig({ upstreamUrl: upstream.url });
  devKey = setup.devKey;
  gw = await startGateway({ ...setup.options, stores });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const body = { model: MODEL, messages: [{ role: 'user', content: 'keep me' }] };
const withKey = (k: string) => ({ headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json', 'idempotency-key': k } });
const charges = async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;

describe('Idempotency-Key: kept before the client holds the answer', () => {
  it('a plain answer is not whole for the client until it is kept, and a retry right after it replays', async () => {
    let release!: () => void;
    saves = { kind: 'held', released: new Promise<void>((r) => (release = r)) };
    const key = `kept-${Math.random()}`;
    // The answer is one chunk: its head may wait with it, so nothing of it is awaited yet.
    let whole = false;
    const text = postChat(gw.baseURL, devKey, body, withKey(key)).then(async (res) => {
      expect(res.status).toBe(200);
      expect(res.headers.get('content-length')).not.toBeNull();
      const t = await res.text();
      whole = true;
      return t;
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(whole, 'the client holds the answer while its save is still pending').toBe(false);
    release();
    const first = await text;
    saves = { kind: 'normal' };
    const before = await charges();
    const again = await postChat(gw.baseURL, devKey, body, withKey(key));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.text()).toBe(first);
    expect(await charges()).toBe(before);
  });

  it('an answer the store cannot keep at first still goes out whole (it is paid for); a retry is 409 until it is kept, then replays it: one charge', async () => {
    saves = { kind: 'refused' };
    const key = `refused-${Math.random()}`;
    const before = await charges();
    const first = await postChat(gw.baseURL, devKey, body, withKey(key));
    expect(first.status).toBe(200);
    const text = await first.text();
    expect(JSON.parse(text)).toMatchObject({ choices: [{ message: { content: 'kept answer' } }] });
    // Cutting it would only have sent the retry to run and be charged again: the key stays in
    // flight while the save is tried again, so a retry now is refused, not run.
    const early = await postChat(gw.baseURL, devKey, body, withKey(key));
    expect(early.status).toBe(409);
    await early.text();
    saves = { kind: 'normal' };
    let again: Response | undefined;
    await eventually(async () => {
      again = await postChat(gw.baseURL, devKey, body, withKey(key));
      if (again.status !== 200) await again.text();
      return again.status === 200;
    }, 'the answer kept on a later try, and replayed', 5_000);
    expect(again!.headers.get('idempotent-replayed')).toBe('true');
    expect(await again!.text()).toBe(text);
    expect(await charges()).toBe(before + 1);
  });
});
