/**
 * Budget alerts: a real webhook receiver gets each crossing exactly once (also after a
 * restart on the same SQLite file), signed, with the same idempotency key on a retry.
 */
import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';
import { MODEL, eventually, postChat, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const SECRET = 'whsec-test-secret';
const received: Array<{ body: any; headers: Record<string, string | string[] | undefined>; raw: string }> = [];
let failNext = 1;
/** How many of the next deliveries get no answer at all (a receiver that hangs), and how many did. */
let hangNext = 0;
let hung = 0;
/** How many of the next deliveries are answered only after `SLOW_MS` (recorded on arrival). */
let slowNext = 0;
const SLOW_MS = 300;
const receiver = createServer((req, res) => {
  let raw = '';
  req.on('data', (c) => (raw += c));
  req.on('end', () => {
    if (hangNext > 0) {
      hangNext--;
      hung++;
      return;
    }
    // The first delivery fails: the retry must carry the same idempotency key.
    if (failNext > 0) {
      failNext--;
      res.writeHead(503).end();
      return;
    }
    received.push({ body: JSON.parse(raw), headers: req.headers, raw });
    if (slowNext > 0) {
      slowNext--;
      setTimeout(() => res.writeHead(204).end(), SLOW_MS);
      return;
    }
    res.writeHead(204).end();
  });
});
let url = '';
const dir = mkdtempSync(join(tmpdir(), 'mg-alerts-'));

beforeAll(async () => {
  receiver.listen(0, '127.0.0.1');
  await once(receiver, 'listening');
  url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});
afterAll(() => {
  receiver.close();
  rmSync(dir, { recursive: true, force: true });
});

it('sends each crossing once, signed, and not again after a restart', async () => {
  const setup = testConfig({ walletUsd: '0.0003' });
  const options = {
    ...setup.options,
    alerts: {
      webhook: { url, secret: SECRET, backoffMs: 20 },
      defaults: { capPercent: [25, 50], balanceBelowUsd: ['0.00025'] },
    },
  };
  const open = () => startGateway({ ...options, stores: createSqliteStores({ path: join(dir, 'g.db') }) });
  let gw = await open();
  const devId = (await gw.gateway.admin.listKeys(setup.account)).find((k) => k.kind === 'developer')!.id;
  await gw.gateway.admin.setMonthlyCap(devId, '0.0002');
  const call = () => postChat(gw.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'hello there' }], max_tokens: 5 });

  // Calls until the key has spent at least half its cap.
  for (let i = 0; i < 30; i++) {
    expect((await call()).status).toBe(200);
    const spent = (await gw.stores.billing.keyUsage(setup.account, devId, new Date().toISOString().slice(0, 7))).monthly;
    if (spent * 2n >= 200_000n) break;
  }
  await eventually(() => received.length >= 3, 'three alerts', 10_000);
  expect((await call()).status).toBe(200);
  await gw.close();

  // A restart on the same file: more charges, no repeated alert.
  gw = await open();
  expect((await call()).status).toBe(200);
  await new Promise((r) => setTimeout(r, 300));
  await gw.close();

  const kinds = received.map((r) => `${r.body.type}:${r.body.threshold}`).sort();
  expect(kinds).toEqual(['budget.balance_below:0.00025', 'budget.key_monthly_cap:25', 'budget.key_monthly_cap:50']);
  for (const r of received) {
    const t = r.headers['x-mg-timestamp'] as string;
    const expected = `t=${t},v1=${createHmac('sha256', SECRET).update(`${t}.${r.raw}`).digest('hex')}`;
    expect(r.headers['x-mg-signature']).toBe(expected);
    expect(r.headers['idempotency-key']).toBe(r.body.id);
    expect(r.body).toMatchObject({ account: setup.account });
  }
  expect(new Set(received.map((r) => r.body.id)).size).toBe(3);
  expect(failNext).toBe(0);
});

it('a crossing by a call that settles during the stop’s grace is still delivered (retried too)', async () => {
  received.length = 0;
  failNext = 1;
  const up = await startTestUpstream();
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  // One call hangs through the whole grace; the other is answered once the stop has begun.
  up.setBehavior((rec) => ((rec.body?.messages as { content: string }[] | undefined)?.[0]?.content === 'hang' ? { kind: 'hang' } : { kind: 'json', gate }));
  const setup = testConfig({ upstreamUrl: up.url, shutdownGraceMs: 1_500 });
  const gw = await startGateway({
    ...setup.options,
    alerts: { webhook: { url, secret: SECRET, backoffMs: 20 }, defaults: { capPercent: [1] } },
  });
  const devId = (await gw.gateway.admin.listKeys(setup.account)).find((k) => k.kind === 'developer')!.id;
  await gw.gateway.admin.setMonthlyCap(devId, '0.001');
  const send = (content: string) => postChat(gw.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content }], max_tokens: 5 }).catch(() => null);
  const hanging = send('hang');
  const answered = send('answered');
  await up.waitForRequests(2);
  // The CLI's stop: no new connection; the calls in flight keep theirs through the grace.
  gw.server.close();
  const disposing = gw.gateway.dispose();
  release();
  expect((await answered)?.status).toBe(200);
  await disposing;
  await hanging;
  gw.server.closeAllConnections();
  await gw.stores.close();
  await up.close();
  expect(received.map((r) => `${r.body.type}:${r.body.threshold}`)).toEqual(['budget.key_monthly_cap:1']);
  expect(failNext).toBe(0);
});

/**
 * A gateway opener on the SQLite file `db` whose alert deliveries get one attempt of up to 1 s:
 * a crossing stays marked "being delivered" for 3 s, unless a stop lets it go.
 */
function oneAttempt(setup: ReturnType<typeof testConfig>, db: string, defaults: Record<string, unknown>) {
  received.length = 0;
  failNext = 0;
  const options = { ...setup.options, alerts: { webhook: { url, secret: SECRET, maxAttempts: 1, timeoutMs: 1_000, backoffMs: 0 }, defaults } };
  return () => startGateway({ ...options, stores: createSqliteStores({ path: join(dir, db) }) });
}

/** Makes the alert delivery `call`'s charge starts hang, and stops the gateway meanwhile. */
async function cutByStop(gw: Awaited<ReturnType<typeof startGateway>>, call: () => Promise<Response>): Promise<void> {
  hangNext = 1;
  hung = 0;
  expect((await call()).status).toBe(200);
  await eventually(() => hung === 1, 'the delivery under way', 5_000);
  await gw.close();
  expect(received).toEqual([]);
}

/**
 * A developer key capped at 0.001 USD on a gateway `oneAttempt` opens: `gw` is the one open now
 * (`reopen` opens the next on the same file), and `call` makes one short chat with the key there.
 */
async function cappedDeveloper(db: string, defaults: Record<string, unknown>) {
  const setup = testConfig({});
  const open = oneAttempt(setup, db, defaults);
  const k = {
    setup,
    gw: await open(),
    devId: '',
    reopen: async () => {
      k.gw = await open();
    },
    call: () => postChat(k.gw.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'hello there' }], max_tokens: 5 }),
  };
  k.devId = (await k.gw.gateway.admin.listKeys(setup.account)).find((x) => x.kind === 'developer')!.id;
  await k.gw.gateway.admin.setMonthlyCap(k.devId, '0.001');
  return k;
}

it('a delivery the stop cut short is sent again by the next charge past the crossing', async () => {
  const k = await cappedDeveloper('cut.db', { capPercent: [1] });

  // The receiver hangs on the crossing's delivery, and the gateway stops meanwhile.
  await cutByStop(k.gw, k.call);

  await k.reopen();
  // Let go by the stop, well before it would have lapsed: the next charge past the crossing
  // sends it, under the same idempotency key.
  expect((await k.call()).status).toBe(200);
  await eventually(() => received.length === 1, 'the alert sent again', 5_000);
  expect(received[0]!.body).toMatchObject({ type: 'budget.key_monthly_cap', threshold: 1, key: k.devId });
  expect(received[0]!.headers['idempotency-key']).toBe(received[0]!.body.id);
  // Delivered: done with, not sent a third time.
  expect((await k.call()).status).toBe(200);
  await new Promise((r) => setTimeout(r, 300));
  await k.gw.close();
  expect(received).toHaveLength(1);
});

it('a delivery the receiver is answering when the gateway stops is recorded, not sent again', async () => {
  const k = await cappedDeveloper('answering.db', { capPercent: [1] });

  // The receiver has the alert and answers it a moment later; the gateway stops meanwhile.
  slowNext = 1;
  expect((await k.call()).status).toBe(200);
  await eventually(() => received.length === 1, 'the alert received', 5_000);
  await k.gw.close();

  // Its answer was waited for: the crossing stands as delivered, and the next charge past it
  // sends nothing.
  await k.reopen();
  expect((await k.call()).status).toBe(200);
  await new Promise((r) => setTimeout(r, SLOW_MS));
  await k.gw.close();
  expect(received).toHaveLength(1);
  expect(slowNext).toBe(0);
});

it('a delivery the stop cut short, for a key its cap now stops, is sent by the next call the cap refuses', async () => {
  const k = await cappedDeveloper('capped.db', { capPercent: [50] });
  const month = new Date().toISOString().slice(0, 7);

  const spentNow = async () => (await k.gw.stores.billing.keyUsage(k.setup.account, k.devId, month)).monthly;
  const usd = (nano: bigint) => (Number(nano) / 1e9).toFixed(9);
  // A first call, far under half the cap, says what one costs; the cap is then four times
  // that, so the second call's charge (the same call) reaches half of it.
  expect((await k.call()).status).toBe(200);
  const one = await spentNow();
  await k.gw.gateway.admin.setMonthlyCap(k.devId, usd(one * 4n));
  // That crossing's delivery hangs, and the gateway stops meanwhile.
  await cutByStop(k.gw, k.call);

  // The cap now leaves no room at all: no call can be charged, so no charge can send it again.
  await k.reopen();
  await k.gw.gateway.admin.setMonthlyCap(k.devId, usd(await spentNow()));
  const refused = await k.call();
  expect(refused.status).toBe(402);
  expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('insufficient_quota');
  await eventually(() => received.length === 1, 'the alert sent by the refusal', 5_000);
  expect(received[0]!.body).toMatchObject({ type: 'budget.key_monthly_cap', threshold: 50, key: k.devId, entry: null, request: refused.headers.get('x-request-id') });
  expect(received[0]!.headers['idempotency-key']).toBe(received[0]!.body.id);
  // Delivered: its record stands, so a refusal on a fresh instance (nothing throttled there) sends nothing more.
  await k.gw.close();
  await k.reopen();
  expect((await k.call()).status).toBe(402);
  await new Promise((r) => setTimeout(r, 300));
  await k.gw.close();
  expect(received).toHaveLength(1);
});

it('a balance delivery the stop cut short is sent by the next call the wallet refuses', async () => {
  // 0.001 USD: one short call takes the balance under 0.00099; a call that may write 4,096
  // tokens (its worst case about 0.008) is refused by the wallet.
  const setup = testConfig({ walletUsd: '0.001' });
  const open = oneAttempt(setup, 'wallet.db', { balanceBelowUsd: ['0.00099'] });
  let gw = await open();
  const call = (max_tokens: number) => postChat(gw.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'hello there' }], max_tokens });
  await cutByStop(gw, () => call(5));

  gw = await open();
  const refused = await call(4096);
  expect(refused.status).toBe(402);
  await eventually(() => received.length === 1, 'the alert sent by the refusal', 5_000);
  expect(received[0]!.body).toMatchObject({ type: 'budget.balance_below', threshold: '0.00099', key: null, entry: null, request: refused.headers.get('x-request-id') });
  // Delivered: its record stands, so a refusal on a fresh instance (nothing throttled there) sends nothing more.
  await gw.close();
  gw = await open();
  expect((await call(4096)).status).toBe(402);
  await new Promise((r) => setTimeout(r, 300));
  await gw.close();
  expect(received).toHaveLength(1);
});
