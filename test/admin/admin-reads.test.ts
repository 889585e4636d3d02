/**
 * The admin API's cross-account reads and its route names: usage and the ledger without
 * `account` (every account's; the ledger paged account by account), the default group_by,
 * ages such as `24h` in from / to, and an admin call's access line and metrics naming the
 * declared route pattern it matched, not the raw path. In-process gateway (gateway.fetch),
 * memory storage, the default logger writing into an array.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/observability/log.js';
import { createLogger } from '../../src/observability/logs.js';
import type { Gateway } from '../../src/gateway.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, MODEL, eventually, makeGateway, testConfig } from '../helpers/gateway.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';

const OTHER = 'beta-co';
const lines: Array<Record<string, unknown>> = [];
const capture: Logger = createLogger('info', {
  write(line: string) {
    lines.push(JSON.parse(line) as Record<string, unknown>);
  },
});

let gateway: Gateway;
let stores: Stores;
let devKey: string;
let otherKey: string;

async function api(method: string, path: string, body?: unknown) {
  const res = await gateway.fetch(
    new Request(`http://gw/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  );
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* csv, jsonl */
  }
  return { status: res.status, json, text, headers: res.headers };
}

async function chat(key: string) {
  const res = await gateway.fetch(
    new Request('http://gw/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
    }),
  );
  await res.text();
  expect(res.status).toBe(200);
}

beforeAll(async () => {
  const setup = testConfig({ walletUsd: 10 });
  devKey = setup.devKey;
  ({ gateway, stores } = await makeGateway({ ...setup.options, admin: { tokenSha256: ADMIN_SHA }, metrics: { path: '/metrics' }, logger: capture }));
  expect((await api('POST', '/accounts', { id: OTHER, walletUsd: '5' })).status).toBe(201);
  otherKey = (await api('POST', '/keys', { account: OTHER })).json.key;
  await chat(devKey);
  await chat(devKey);
  await chat(otherKey);
});

afterAll(async () => {
  await gateway?.dispose();
  await stores?.close();
});

describe('admin API: reads across accounts', () => {
  it('usage without account: by account and by model across both accounts; day by default; from=24h', async () => {
    const byAccount = await api('GET', '/usage?group_by=account');
    expect(byAccount.status).toBe(200);
    expect(byAccount.json.data.map((r: any) => [r.group, r.calls])).toEqual(
      [
        [ACCOUNT, 2],
        [OTHER, 1],
      ].sort(([a], [b]) => String(a).localeCompare(String(b))),
    );
    const byModel = await api('GET', '/usage?group_by=model');
    expect(byModel.json.data).toEqual([expect.objectContaining({ group: MODEL, calls: 3 })]);
    expect(byModel.json.totalUsd).toBe(byAccount.json.totalUsd);

    const byDefault = await api('GET', '/usage');
    expect(byDefault.json.groupBy).toBe('day');
    expect(byDefault.json.data).toEqual([expect.objectContaining({ group: new Date().toISOString().slice(0, 10), calls: 3 })]);
    expect((await api('GET', `/usage?account=${OTHER}`)).json.data[0].calls).toBe(1);

    expect((await api('GET', '/usage?group_by=account&from=24h')).json.data.map((r: any) => r.calls).sort()).toEqual([1, 2]);
    // An age counts back from now: nothing is older than 24h.
    expect((await api('GET', '/usage?to=24h')).json.data).toEqual([]);
    expect((await api('GET', '/usage?from=24x')).status).toBe(400);
    expect((await api('GET', '/usage?account=nobody')).status).toBe(404);
  });

  it('the ledger without account: both accounts’ entries, paged account by account with a cursor', async () => {
    const all = await api('GET', '/ledger?limit=1000');
    expect(all.json.more).toBe(false);
    const accounts = all.json.data.map((e: any) => e.account) as string[];
    expect(new Set(accounts)).toEqual(new Set([ACCOUNT, OTHER]));
    // Account by account, ids ascending.
    expect(accounts).toEqual([...accounts].sort());
    const ids: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    for (;;) {
      const page = await api('GET', `/ledger?limit=2${cursor === undefined ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
      expect(page.status).toBe(200);
      expect(page.json.data.length).toBeLessThanOrEqual(2);
      ids.push(...page.json.data.map((e: any) => e.id));
      pages++;
      if (!page.json.more) break;
      cursor = page.json.nextCursor;
    }
    expect(pages).toBeGreaterThan(1);
    expect(ids).toEqual(all.json.data.map((e: any) => e.id));
    // A cursor from the end stays valid: later entries of the last account follow it.
    const end = (await api('GET', `/ledger?cursor=${encodeURIComponent(cursor ?? all.json.nextCursor)}&limit=1000`)).json;
    expect(end.more).toBe(false);
    expect((await api('GET', '/ledger?cursor=bogus')).status).toBe(400);

    const jsonl = await api('GET', '/ledger?format=jsonl');
    expect(jsonl.text.trim().split('\n').map((l) => JSON.parse(l).id)).toEqual(ids);
    const csv = await api('GET', '/ledger?format=csv&from=7d');
    expect(csv.text.trim().split('\n')).toHaveLength(1 + ids.length);
  });
});

describe('admin API: route names', () => {
  it('an admin call’s access line and metrics name the declared route pattern', async () => {
    const res = await api('GET', `/accounts/${OTHER}`);
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id');
    const access = () => lines.filter((l) => l.msg === 'access' && l.request_id === requestId);
    await eventually(() => access().length > 0, 'the access line of the admin call');
    expect(access()[0]).toMatchObject({ route: '/admin/v1/accounts/{id}', status: 200 });
    const metrics = await (await gateway.fetch(new Request('http://gw/metrics'))).text();
    expect(metrics).toContain('route="/admin/v1/accounts/{id}"');
    expect(metrics).not.toContain(`/admin/v1/accounts/${OTHER}`);
  });
});
