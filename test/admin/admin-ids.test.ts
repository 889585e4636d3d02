/**
 * Ids that would break things are refused at the admin API, on every driver: `.` and `..`
 * (dot segments: an account `..` could never be opened or deleted in the console), ids with
 * characters outside the ids' format, and a NUL anywhere in an id the path or query names,
 * which is 404 (it names nothing stored) and never 503 (PostgreSQL cannot bind a NUL).
 * Requests go over real HTTP, byte for byte (fetch would resolve the dot segments itself).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';

const pgUp = (await postgresProblem(POSTGRES_URL)) === null;
const SCHEMA = freshSchema();
const dirs: string[] = [];

const drivers: Array<[string, boolean, () => Promise<Stores>]> = [
  ['memory', true, async () => createMemoryStores()],
  [
    'sqlite',
    true,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'mg-admin-ids-'));
      dirs.push(dir);
      return createSqliteStores({ path: join(dir, 'g.db') });
    },
  ],
  ['postgres', pgUp || process.env.CI === 'true', () => createPostgresStores({ url: POSTGRES_URL, schema: SCHEMA, maxConnections: 4 })],
];

afterAll(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  if (pgUp) await dropSchema(SCHEMA);
});

/** `target` under /admin/v1 exactly as written. */
function send(origin: string, method: string, target: string, body?: unknown) {
  const { hostname, port } = new URL(origin);
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise<{ status: number; json: { error?: { code: string; param: string | null; message: string } } & Record<string, unknown> }>(
    (resolve, reject) => {
      const req = httpRequest(
        {
          hostname,
          port,
          method,
          path: `/admin/v1${target}`,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(payload ? { 'content-type': 'application/json' } : {}) },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, json: text ? JSON.parse(text) : {} }));
        },
      );
      req.on('error', reject);
      req.end(payload);
    },
  );
}

/** Every admin route with a path parameter, each parameter given as `value`, with a body its schema takes. */
const routesNaming = (value: string): Array<[string, string, unknown?]> => [
  ['GET', `/accounts/${value}`],
  ['POST', `/accounts/${value}/credits`, { amountUsd: '1', reason: 'r' }],
  ['POST', `/accounts/${value}/adjustments`, { amountUsd: '1', reason: 'r' }],
  ['PUT', `/accounts/${value}/grants`, { models: [] }],
  ['PUT', `/accounts/${value}/budgets`, { budgets: [] }],
  ['GET', `/accounts/${value}/brands`],
  ['GET', `/accounts/${ACCOUNT}/brands/${value}`],
  ['PUT', `/accounts/${ACCOUNT}/brands/${value}`, { voice: 'v' }],
  ['DELETE', `/accounts/${ACCOUNT}/brands/${value}`],
  ['GET', `/accounts/${value}/documents`],
  ['GET', `/accounts/${ACCOUNT}/documents/${value}`],
  ['PUT', `/accounts/${ACCOUNT}/documents/${value}`, { text: 't' }],
  ['DELETE', `/accounts/${ACCOUNT}/documents/${value}`],
  ['GET', `/keys/${value}`],
  ['DELETE', `/keys/${value}`],
  ['POST', `/keys/${value}/disable`],
  ['POST', `/keys/${value}/enable`],
  ['POST', `/keys/${value}/rotate`],
  ['PUT', `/keys/${value}/limits`, {}],
  ['PUT', `/keys/${value}/monthly-cap`, { monthlyCapUsd: null }],
  ['GET', `/jobs/${value}`],
  ['GET', `/keys?account=${value}`],
  ['GET', `/jobs?account=${value}`],
  ['GET', `/ledger?account=${value}`],
  ['GET', `/ledger/latest?account=${value}`],
  ['GET', `/usage?account=${value}`],
  ['GET', `/audit?account=${value}`],
];

describe.each(drivers)('%s: ids at the admin API', (_driver, enabled, makeStores) => {
  let gw: RunningGateway;
  beforeAll(async () => {
    if (!enabled) return;
    gw = await startGateway({ ...testConfig().options, stores: await makeStores(), admin: { tokenSha256: ADMIN_SHA } });
  });
  afterAll(async () => {
    if (enabled) await gw.close();
  });

  it.skipIf(!enabled)('an account id ".", "..", or outside the format is 400 naming id; a valid one is created', async () => {
    for (const id of ['.', '..', 'a/b', 'a b', 'x'.repeat(65), 'a:b', 'a\u0000b', 'a\r\nb', '']) {
      const r = await send(gw.origin, 'POST', '/accounts', { id });
      expect(r.status, JSON.stringify(id)).toBe(400);
      expect(r.json.error).toMatchObject({ code: 'invalid_request', param: 'id' });
    }
    expect((await send(gw.origin, 'POST', '/accounts', { id: 'a.b-c_D.9' })).status).toBe(201);
    expect((await send(gw.origin, 'GET', '/accounts/a.b-c_D.9')).json).toMatchObject({ id: 'a.b-c_D.9' });
  });

  it.skipIf(!enabled)('a brand or document id "." or ".." is 400 naming it, nothing stored', async () => {
    for (const id of ['%2e', '%2E%2e', '..', '.']) {
      const brand = await send(gw.origin, 'PUT', `/accounts/${ACCOUNT}/brands/${id}`, { voice: 'v' });
      expect(brand.status, id).toBe(400);
      expect(brand.json.error).toMatchObject({ code: 'invalid_request', param: 'brand' });
      const doc = await send(gw.origin, 'PUT', `/accounts/${ACCOUNT}/documents/${id}`, { text: 't' });
      expect(doc.status, id).toBe(400);
      expect(doc.json.error).toMatchObject({ code: 'invalid_request', param: 'doc' });
    }
    expect((await send(gw.origin, 'GET', `/accounts/${ACCOUNT}/brands`)).json.data).toEqual([]);
    expect((await send(gw.origin, 'GET', `/accounts/${ACCOUNT}/documents`)).json.data).toEqual([]);
  });

  it.skipIf(!enabled)('a NUL in any id the path or query names is 404 naming it, never 503', async () => {
    for (const [method, target, body] of routesNaming('a%00b')) {
      const r = await send(gw.origin, method, target, body);
      expect(r.status, `${method} ${target}`).toBe(404);
      expect(r.json.error?.code).toBe('not_found');
    }
  });

  it.skipIf(!enabled)('a NUL in an id a body names is 400 naming the field, never 503', async () => {
    const key = await send(gw.origin, 'POST', '/keys', { account: 'a\u0000b' });
    expect(key.status).toBe(400);
    expect(key.json.error).toMatchObject({ code: 'invalid_request', param: 'account' });
    const credit = await send(gw.origin, 'POST', `/accounts/${ACCOUNT}/credits`, { amountUsd: '1', reason: 'r', id: 'c\u0000' });
    expect(credit.status).toBe(400);
    expect(credit.json.error).toMatchObject({ code: 'invalid_request', param: 'id' });
  });

  it.skipIf(!enabled)('a NUL in any free text a body stores is 400 naming the field, never 503', async () => {
    const nul = 'a\u0000b';
    const cases: Array<[string, string, Record<string, unknown>, string]> = [
      ['POST', '/keys', { account: ACCOUNT, label: nul }, 'label'],
      ['POST', `/accounts/${ACCOUNT}/credits`, { amountUsd: '1', reason: nul }, 'reason'],
      ['POST', `/accounts/${ACCOUNT}/adjustments`, { amountUsd: '-1', reason: nul }, 'reason'],
      ['PUT', `/accounts/${ACCOUNT}/brands/b1`, { voice: nul }, 'voice'],
      ['PUT', `/accounts/${ACCOUNT}/brands/b1`, { voice: 'v', name: nul }, 'name'],
      ['PUT', `/accounts/${ACCOUNT}/brands/b1`, { voice: 'v', description: nul }, 'description'],
      ['PUT', `/accounts/${ACCOUNT}/documents/d1`, { text: nul }, 'text'],
      ['PUT', `/accounts/${ACCOUNT}/documents/d1`, { text: 't', title: nul }, 'title'],
    ];
    for (const [method, target, body, field] of cases) {
      const r = await send(gw.origin, method, target, body);
      expect(r.status, `${method} ${target} ${field}`).toBe(400);
      expect(r.json.error, field).toMatchObject({ code: 'invalid_request', param: field });
    }
    // Nothing was stored; the same text without the NUL is.
    expect((await send(gw.origin, 'GET', `/accounts/${ACCOUNT}/brands`)).json.data).toEqual([]);
    expect((await send(gw.origin, 'PUT', `/accounts/${ACCOUNT}/brands/b1`, { voice: 'a\tb', name: 'n' })).status).toBe(200);
  });
});
