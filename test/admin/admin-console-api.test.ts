/**
 * The admin API the console runs on: the overview of every account's spend, account search
 * with paging, key labels in usage by key, the latest ledger entries newest first, this
 * instance's recent requests and errors (a bounded ring), latency and error rate per model,
 * upstream and breaker status, and the admin change log (a log line and the recent-changes
 * view, naming the token's label, never the token). Each runs on memory, SQLite (a real
 * database file) and PostgreSQL (a fresh schema, dropped after); the store reads also have
 * their conformance tests on every driver.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import * as R from '../../src/admin/responses.js';
import type { Gateway } from '../../src/gateway.js';
import type { Logger } from '../../src/observability/log.js';
import { createLogger } from '../../src/observability/logs.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';
import type { Stores } from '../../src/stores/types.js';
import { MODEL, makeGateway, testConfig } from '../helpers/gateway.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';

const BROKEN = 'broken/chat';
const RING = 8;

const drivers: Record<string, () => Promise<{ stores: Stores; cleanup(): Promise<void> | void }>> = {
  memory: async () => ({ stores: createMemoryStores(), cleanup() {} }),
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mg-console-api-'));
    return { stores: createSqliteStores({ path: join(dir, 'gw.db') }), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
  },
};
const pgProblem = await postgresProblem(POSTGRES_URL);
if (pgProblem === null) {
  drivers.postgres = async () => {
    const schema = freshSchema();
    return { stores: await createPostgresStores({ url: POSTGRES_URL, schema, maxConnections: 4 }), cleanup: () => dropSchema(schema) };
  };
} else if (process.env.CI === 'true') {
  throw new Error(`PostgreSQL at ${POSTGRES_URL} is unreachable (${pgProblem}): required under CI=true.`);
} else {
  console.warn(`\n!!! SKIPPING the admin console API on PostgreSQL: ${POSTGRES_URL} is unreachable (${pgProblem}).\n`);
}

for (const [driver, make] of Object.entries(drivers)) {
  describe(`admin API for the console (${driver})`, () => {
    const lines: Array<Record<string, unknown>> = [];
    const capture: Logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    let gateway: Gateway;
    let store: Awaited<ReturnType<typeof make>>;
    const setup = testConfig({
      walletUsd: 10,
      // A model whose upstream refuses connections: its calls are 502s and open its circuit.
      models: [{ id: BROKEN, upstream: 'down', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    });

    async function api(method: string, path: string, body?: unknown) {
      const res = await gateway.fetch(
        new Request(`http://gw/admin/v1${path}`, {
          method,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
      );
      return { status: res.status, json: (await res.json()) as any };
    }

    async function chat(key: string, model = MODEL) {
      const res = await gateway.fetch(
        new Request('http://gw/v1/chat/completions', {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
        }),
      );
      return { status: res.status, id: res.headers.get('x-request-id') ?? '', body: await res.text() };
    }

    beforeAll(async () => {
      store = await make();
      const options = setup.options;
      ({ gateway } = await makeGateway({
        ...options,
        upstreams: { ...options.upstreams, down: { baseUrl: 'http://127.0.0.1:1/v1', apiKey: 'sk-down-Zq8vW2xK9pL4', timeoutMs: 2_000 } },
        stores: store.stores,
        admin: { tokenSha256: ADMIN_SHA, label: 'ops-team', recentRequests: RING },
        logger: capture,
      }));
    });
    afterAll(async () => {
      await gateway?.dispose();
      await store?.stores.close();
      await store?.cleanup();
    });

    it('creates accounts and keys through the API; searches and pages accounts by id', async () => {
      for (const id of ['zeta-1', 'zeta-2', 'zeta-3', 'Zeta-Big', 'omega']) expect((await api('POST', '/accounts', { id, walletUsd: '3' })).status).toBe(201);
      const first = await api('GET', '/accounts?search=zeta&limit=2');
      expect(first.status).toBe(200);
      expect(first.json).toMatchObject({ total: 4, more: true, nextCursor: 'zeta-1' });
      expect(first.json.data.map((a: any) => a.id)).toEqual(['Zeta-Big', 'zeta-1']);
      expect(first.json.data[0]).toMatchObject({ balanceUsd: '3', heldUsd: '0' });
      expect(R.accountsPage.parse(first.json)).toBeTruthy();
      const second = await api('GET', `/accounts?search=ZETA&limit=2&cursor=${first.json.nextCursor}`);
      expect(second.json.data.map((a: any) => a.id)).toEqual(['zeta-2', 'zeta-3']);
      expect(second.json.more).toBe(false);
      expect((await api('GET', '/accounts?search=nothing-like-it')).json).toMatchObject({ data: [], total: 0, more: false });
      expect((await api('GET', '/accounts?limit=0')).json.error.param).toBe('limit');
    });

    it('overview: total spend, top accounts and models, spend per day; usage by key carries labels', async () => {
      const key = (await api('POST', '/keys', { account: 'zeta-2', label: 'Checkout bot' })).json;
      expect(key.key).toMatch(/^sk-mg-/);
      for (let i = 0; i < 3; i++) expect((await chat(key.key)).status).toBe(200);
      expect((await chat(setup.devKey)).status).toBe(200);
      const o = await api('GET', '/overview?from=7d&top=1');
      expect(o.status).toBe(200);
      expect(o.json.calls).toBe(4);
      expect(R.overview.parse(o.json)).toBeTruthy();
      expect(o.json.topAccounts).toHaveLength(1);
      expect(o.json.topAccounts[0]).toMatchObject({ group: 'zeta-2', calls: 3 });
      expect(o.json.topModels[0]).toMatchObject({ group: MODEL, calls: 4 });
      // Exact: the total is the sum of the charges, as the ledger has them.
      const charges = (await api('GET', '/usage?group_by=account')).json;
      expect(o.json.totalUsd).toBe(charges.totalUsd);
      expect(o.json.days).toEqual([{ group: new Date().toISOString().slice(0, 10), calls: 4, costUsd: charges.totalUsd }]);
      expect(o.json.accounts).toBe(6);
      // A range with nothing in it.
      expect((await api('GET', '/overview?to=2000-01-01')).json).toMatchObject({ calls: 0, totalUsd: '0', topAccounts: [], days: [] });

      const byKey = await api('GET', '/usage?account=zeta-2&group_by=key');
      expect(byKey.json.data).toEqual([expect.objectContaining({ group: key.id, label: 'Checkout bot', account: 'zeta-2', calls: 3 })]);
    });

    it('the latest ledger entries, newest first, bounded by the limit', async () => {
      const latest = await api('GET', '/ledger/latest?account=zeta-2&limit=2');
      expect(latest.status).toBe(200);
      expect(latest.json.data).toHaveLength(2);
      expect(R.latestLedger.parse(latest.json)).toBeTruthy();
      const all = (await api('GET', '/ledger?account=zeta-2&limit=100')).json.data;
      expect(all).toHaveLength(4); // the opening balance and three calls
      expect(latest.json.data.map((e: any) => e.id)).toEqual([all[3].id, all[2].id]);
      expect((await api('GET', '/ledger/latest?account=no-such')).status).toBe(404);
    });

    it('recent requests and errors from the ring (bounded), per-model latency and error rate, breaker status', async () => {
      const failed = [];
      for (let i = 0; i < 5; i++) failed.push(await chat(setup.devKey, BROKEN));
      // 502 while the upstream is tried, then 503 once its circuit is open: all errors.
      expect(failed[0]!.status).toBe(502);
      expect(failed.every((f) => f.status === 502 || f.status === 503)).toBe(true);
      const ok = await chat(setup.devKey);
      const recent = await api('GET', '/requests?limit=3');
      expect(recent.json.kept).toBe(RING);
      expect(R.requests.parse(recent.json)).toBeTruthy();
      expect(recent.json.data).toHaveLength(3);
      expect(recent.json.data[0]).toMatchObject({ request_id: ok.id, route: '/v1/chat/completions', status: 200, model: MODEL, account: setup.account });
      expect(recent.json.data[0].cost_usd).toMatch(/^0\.\d+$/);
      expect(recent.json.data[0].latency_ms).toBeGreaterThanOrEqual(0);
      expect(recent.json.data[1]).toMatchObject({ request_id: failed[4]!.id, status: failed[4]!.status, model: BROKEN });
      expect(recent.json.data[1].error_code).toMatch(/^(upstream_error|model_unavailable)$/);
      // The ring keeps RING requests, newest first, and none of the admin calls.
      const everything = (await api('GET', '/requests?limit=1000')).json.data;
      expect(everything).toHaveLength(RING);
      expect(everything.every((r: any) => r.route.startsWith('/v1'))).toBe(true);
      const errors = (await api('GET', '/requests?errors=true')).json.data;
      expect(errors.map((r: any) => r.request_id)).toEqual(failed.map((f) => f.id).reverse());
      expect((await api('GET', `/requests?account=${setup.account}&limit=1`)).json.data[0].request_id).toBe(ok.id);

      const statsAnswer = (await api('GET', '/model-stats')).json;
      expect(R.modelStats.parse(statsAnswer)).toBeTruthy();
      const stats = statsAnswer.data;
      const broken = stats.find((s: any) => s.model === BROKEN);
      expect(broken).toMatchObject({ calls: 5, errors: 5, error_rate: 1 });
      const good = stats.find((s: any) => s.model === MODEL);
      expect(good).toMatchObject({ errors: 0, error_rate: 0 });
      expect(good.p95_ms).toBeGreaterThanOrEqual(good.p50_ms);

      const upsAnswer = (await api('GET', '/upstreams')).json;
      expect(R.upstreams.parse(upsAnswer)).toBeTruthy();
      const ups = upsAnswer.data;
      expect(ups.find((u: any) => u.name === 'down')).toMatchObject({ state: 'open', models: [BROKEN], simulated: false });
      expect(ups.find((u: any) => u.name === 'down').recentFailures).toBeGreaterThanOrEqual(5);
      expect(ups.find((u: any) => u.name !== 'down')).toMatchObject({ state: 'closed', openedAt: null });
    });

    it('a 403 model_not_allowed names its model in recent requests and counts as refused; requests page with before', async () => {
      const limited = (await api('POST', '/keys', { account: setup.account, models: [BROKEN] })).json.key as string;
      const refused = await chat(limited, MODEL);
      expect(refused.status).toBe(403);
      const [row] = (await api('GET', '/requests?limit=1')).json.data;
      expect(row).toMatchObject({ request_id: refused.id, status: 403, error_code: 'model_not_allowed', model: MODEL });
      const before = (await api('GET', '/model-stats')).json.data.find((s: any) => s.model === MODEL).refused;
      expect(before).toBeGreaterThanOrEqual(1);
      await chat(limited, MODEL);
      expect((await api('GET', '/model-stats')).json.data.find((s: any) => s.model === MODEL).refused).toBe(before + 1);

      // Pages of 3, newest first, each from the last request_id of the one before, cover the ring once.
      const all = (await api('GET', '/requests?limit=1000')).json.data.map((r: any) => r.request_id);
      const seen: string[] = [];
      let page = (await api('GET', '/requests?limit=3')).json;
      for (;;) {
        seen.push(...page.data.map((r: any) => r.request_id));
        if (!page.more) break;
        page = (await api('GET', `/requests?limit=3&before=${seen.at(-1)}`)).json;
      }
      expect(seen).toEqual(all);
      expect((await api('GET', '/requests?before=req_gone_from_the_ring')).json).toMatchObject({ data: [], more: false });
    });

    it('every change is logged with who (the token label, never the token) and what', async () => {
      const credit = await api('POST', '/accounts/omega/credits', { amountUsd: '2.5', reason: 'goodwill' });
      expect(credit.status).toBe(201);
      const key = (await api('POST', '/keys', { account: 'omega', label: 'ci', monthlyCapUsd: '4' })).json;
      const limits = { models: [MODEL], tokensPerMinute: 5000, budgets: [{ usd: '1', period: 'day' }] };
      expect((await api('PUT', `/keys/${key.id}/limits`, limits)).status).toBe(200);
      expect((await api('PUT', '/accounts/omega/budgets', { budgets: [{ usd: '9', period: 'week' }] })).status).toBe(200);
      expect((await api('PUT', `/keys/${key.id}/monthly-cap`, { monthlyCapUsd: '7' })).status).toBe(200);
      expect((await api('PUT', '/accounts/omega/grants', { models: [MODEL] })).status).toBe(200);
      const logged = lines.filter((l) => l.msg === 'admin change');
      const creditLine = logged.find((l) => l.route === '/admin/v1/accounts/{id}/credits');
      expect(creditLine).toMatchObject({ admin: 'ops-team', method: 'POST', target: { id: 'omega', result_id: credit.json.id }, change: { amountUsd: '2.5', reason: 'goodwill' } });
      expect(creditLine?.token_id).toMatch(/^adm_[0-9a-f]{12}$/);
      expect(logged.findLast((l) => l.route === '/admin/v1/keys')).toMatchObject({ target: { result_id: key.id }, change: { account: 'omega', label: 'ci', monthlyCapUsd: '4' } });
      expect(logged.find((l) => l.route === '/admin/v1/keys/{id}/monthly-cap')).toMatchObject({ target: { id: key.id }, change: { monthlyCapUsd: '7' } });
      expect(logged.find((l) => l.route === '/admin/v1/accounts/{id}/grants')).toMatchObject({ change: { models: [MODEL] } });
      expect(logged.find((l) => l.route === '/admin/v1/keys/{id}/limits')).toMatchObject({ target: { id: key.id }, change: limits });
      expect(logged.find((l) => l.route === '/admin/v1/accounts/{id}/budgets')).toMatchObject({ change: { budgets: [{ usd: '9', period: 'week' }] } });
      // Reads are not changes; no line holds the token or a key's secret.
      expect(logged.some((l) => l.route === '/admin/v1/overview')).toBe(false);
      const text = JSON.stringify(lines);
      expect(text).not.toContain(ADMIN_TOKEN);
      expect(text).not.toContain(ADMIN_SHA);
      expect(text).not.toContain(key.key);

      const viewAnswer = (await api('GET', '/changes?limit=2')).json;
      expect(R.changes.parse(viewAnswer)).toBeTruthy();
      const view = viewAnswer.data;
      expect(view.map((c: any) => c.route)).toEqual(['/admin/v1/accounts/{id}/grants', '/admin/v1/keys/{id}/monthly-cap']);
      expect(view[0]).toMatchObject({ admin: 'ops-team', target: { id: 'omega' } });
    });

    it('documents every new route in the OpenAPI document', async () => {
      const doc = (await (await gateway.fetch(new Request('http://gw/admin/v1/openapi.json'))).json()) as any;
      for (const p of ['/overview', '/ledger/latest', '/requests', '/model-stats', '/upstreams', '/changes']) {
        expect(doc.paths[`/admin/v1${p}`]?.get?.summary, p).toBeTruthy();
      }
      // Their answers' shapes are described, from the same schemas the answers are checked with above.
      expect(doc.paths['/admin/v1/overview'].get.responses['200'].content['application/json'].schema.required).toEqual(
        expect.arrayContaining(['totalUsd', 'topAccounts', 'topModels', 'days']),
      );
      expect(doc.paths['/admin/v1/requests'].get.responses['200'].content['application/json'].schema.properties.data.items.required).toEqual(
        expect.arrayContaining(['request_id', 'time', 'route', 'status', 'key_id', 'account', 'model', 'latency_ms', 'cost_usd']),
      );
      expect(doc.paths['/admin/v1/accounts'].get.parameters.map((p: any) => p.name)).toEqual(['search', 'cursor', 'limit']);
      expect(doc.paths['/admin/v1/requests'].get.parameters.map((p: any) => p.name)).toEqual(['account', 'key', 'errors', 'before', 'limit']);
    });
  });
}
