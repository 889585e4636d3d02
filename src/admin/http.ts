/**
 * The admin HTTP API (under /admin/v1) and the web console (at /admin). Operators only: every
 * /admin/v1 route but the OpenAPI document needs `Authorization: Bearer <admin token>`, whose
 * SHA-256 is compared in constant time with the configured digest (the token is never kept).
 * It is outside /v1 and its limits; errors use the same envelope as /v1.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Response } from '@whatwg-node/server';
import { z } from 'zod';
import { AdminError, type Admin } from './accounts.js';
import type { Services } from '../services.js';
import { GatewayError, errorResponse } from '../errors.js';
import { readBody } from '../http/body.js';
import { json, parseJsonObject } from '../http/json.js';
import { jobView } from '../jobs/runner.js';
import { ledgerHeader, ledgerLine } from './ledger-export.js';
import { formatUsd } from '../billing/money.js';
import { isStoreUnavailable } from '../stores/errors.js';
import { consoleAsset } from './console.js';
import * as S from './schemas.js';
import { ledgerEntries, usageReport } from './usage.js';

export interface AdminHttpOptions {
  /** Hex SHA-256 of the admin token. */
  tokenSha256: string;
}

interface Call {
  request: Request;
  params: Record<string, string>;
  query: URLSearchParams;
  body(): Promise<Record<string, unknown>>;
}

interface AdminRoute {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** Path after /admin/v1, with {name} parameters. */
  path: string;
  summary: string;
  body?: z.ZodType;
  query?: z.ZodType;
  /** The success status. @default 200 */
  status?: number;
  run(c: Call): Promise<unknown>;
}

/** Parses with a schema; a violation is 400 invalid_request naming the field. */
function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const param = issue?.path.map(String).join('.') || null;
  throw new GatewayError('invalid_request', `${param ?? 'body'}: ${issue?.message ?? 'invalid'}`, { param });
}

const notFound = (what: string, id: string) =>
  new GatewayError('not_found', `No ${what} "${id.slice(0, 200)}".`, { param: 'id' });

/** A query value that is all digits is unix ms; anything else an ISO 8601 date. */
const timeParam = (v: string | undefined) => (v === undefined ? undefined : /^\d+$/.test(v) ? Number(v) : v);

export function createAdminHttp(core: Services, admin: Admin, options: AdminHttpOptions) {
  const { stores } = core;
  const expected = Buffer.from(options.tokenSha256.toLowerCase(), 'hex');

  function authorize(request: Request): void {
    const header = request.headers.get('authorization') ?? '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    const presented = createHash('sha256').update(m?.[1] ?? '').digest();
    // Digests of equal length: the comparison time says nothing about the token.
    if (!m || !timingSafeEqual(presented, expected)) {
      throw new GatewayError('invalid_api_key', 'Missing or invalid admin token.', { headers: { 'www-authenticate': 'Bearer' } });
    }
  }

  async function account(id: string) {
    const acct = await stores.accounts.get(id);
    if (!acct) throw notFound('account', id);
    const w = await stores.billing.wallet(id);
    return {
      id: acct.id,
      grants: acct.grants,
      createdAt: acct.createdAt,
      balanceUsd: formatUsd(w.balance),
      heldUsd: formatUsd(w.held),
      openHolds: await stores.billing.openHolds(id),
    };
  }

  async function key(id: string) {
    const k = await admin.getKey(id);
    if (!k) throw notFound('key', id);
    return k;
  }

  const routes: AdminRoute[] = [
    { method: 'GET', path: '/accounts', summary: 'List accounts with their wallets', run: async () => ({ object: 'list', data: await admin.listAccounts() }) },
    {
      method: 'POST',
      path: '/accounts',
      summary: 'Create an account (its wallet credited with walletUsd)',
      body: S.createAccountBody,
      status: 201,
      async run(c) {
        const b = parse(S.createAccountBody, await c.body());
        const { created } = await admin.createAccount({ id: b.id, walletUsd: b.walletUsd ?? 0, grants: b.grants ?? [] });
        if (!created) throw new GatewayError('conflict', `Account "${b.id}" already exists.`, { status: 409, type: 'invalid_request_error', param: 'id' });
        return account(b.id);
      },
    },
    { method: 'GET', path: '/accounts/{id}', summary: 'An account, its wallet balance and holds', run: (c) => account(c.params.id!) },
    {
      method: 'POST',
      path: '/accounts/{id}/credits',
      summary: 'Top up a wallet (a ledger entry with the reason)',
      body: S.creditBody,
      status: 201,
      async run(c) {
        const b = parse(S.creditBody, await c.body());
        await account(c.params.id!);
        return admin.credit(c.params.id!, b);
      },
    },
    {
      method: 'POST',
      path: '/accounts/{id}/adjustments',
      summary: 'Adjust a wallet by a signed amount (a ledger entry with the reason)',
      body: S.adjustmentBody,
      status: 201,
      async run(c) {
        const b = parse(S.adjustmentBody, await c.body());
        await account(c.params.id!);
        return admin.credit(c.params.id!, b);
      },
    },
    {
      method: 'PUT',
      path: '/accounts/{id}/grants',
      summary: 'Replace the "Contact sales" models an account is granted',
      body: S.grantsBody,
      async run(c) {
        const b = parse(S.grantsBody, await c.body());
        await account(c.params.id!);
        await admin.setGrants(c.params.id!, b.models);
        return account(c.params.id!);
      },
    },
    {
      method: 'GET',
      path: '/keys',
      summary: "List an account's keys (never their secrets)",
      query: S.keysQuery,
      async run(c) {
        const q = parse(S.keysQuery, Object.fromEntries(c.query));
        await account(q.account);
        return { object: 'list', data: await admin.listKeys(q.account) };
      },
    },
    {
      method: 'POST',
      path: '/keys',
      summary: 'Create a key: the answer holds the key, shown this once',
      body: S.createKeyBody,
      status: 201,
      async run(c) {
        const b = parse(S.createKeyBody, await c.body());
        await account(b.account);
        const created = await admin.createKey(b);
        return { ...(await key(created.id)), key: created.key };
      },
    },
    { method: 'GET', path: '/keys/{id}', summary: 'A key', run: (c) => key(c.params.id!) },
    {
      method: 'DELETE',
      path: '/keys/{id}',
      summary: 'Delete a key (its ledger entries stay)',
      async run(c) {
        await key(c.params.id!);
        await admin.deleteKey(c.params.id!);
        return { id: c.params.id, deleted: true };
      },
    },
    {
      method: 'POST',
      path: '/keys/{id}/disable',
      summary: 'Disable a key (calls with it get 401)',
      async run(c) {
        await key(c.params.id!);
        await admin.disableKey(c.params.id!);
        return key(c.params.id!);
      },
    },
    {
      method: 'POST',
      path: '/keys/{id}/enable',
      summary: 'Enable a disabled key',
      async run(c) {
        await key(c.params.id!);
        await admin.enableKey(c.params.id!);
        return key(c.params.id!);
      },
    },
    {
      method: 'POST',
      path: '/keys/{id}/rotate',
      summary: 'Replace a key’s secret (same id, spend and settings): the new key is shown this once',
      async run(c) {
        await key(c.params.id!);
        const r = await admin.rotateKey(c.params.id!);
        return { ...(await key(r.id)), key: r.key };
      },
    },
    {
      method: 'PUT',
      path: '/keys/{id}/monthly-cap',
      summary: 'Set (USD) or clear (null) a key’s monthly cap',
      body: S.monthlyCapBody,
      async run(c) {
        const b = parse(S.monthlyCapBody, await c.body());
        await key(c.params.id!);
        return admin.setMonthlyCap(c.params.id!, b.monthlyCapUsd);
      },
    },
    ...contentRoutes(),
    {
      method: 'GET',
      path: '/ledger',
      summary: 'An account’s ledger, oldest first: a page (json) or every matching entry (csv, jsonl)',
      query: S.ledgerQuery,
      async run(c) {
        const q = parse(S.ledgerQuery, Object.fromEntries(c.query));
        await account(q.account);
        const filter = { account: q.account, key: q.key, from: timeParam(q.from), to: timeParam(q.to) };
        if (q.format === 'csv' || q.format === 'jsonl') {
          // Checked before the first byte: a bad filter is still a 400 envelope.
          await admin.ledger({ ...filter, limit: 1 });
          return exportResponse(q.format, filter);
        }
        const page = await admin.ledger({ ...filter, cursor: q.cursor, limit: q.limit ?? 100 });
        return { object: 'list', data: page.entries.map(entryView), nextCursor: page.nextCursor, more: page.more };
      },
    },
    {
      method: 'GET',
      path: '/usage',
      summary: 'Spend and calls by day (UTC), model or key over [from, to)',
      query: S.usageQuery,
      async run(c) {
        const q = parse(S.usageQuery, Object.fromEntries(c.query));
        await account(q.account);
        const r = await usageReport(admin, { account: q.account, groupBy: q.group_by, from: timeParam(q.from), to: timeParam(q.to) });
        return { object: 'list', groupBy: q.group_by, data: r.rows, totalUsd: r.totalUsd, truncated: r.truncated };
      },
    },
    {
      method: 'GET',
      path: '/jobs',
      summary: 'An account’s unfinished image and video jobs',
      query: S.jobsQuery,
      async run(c) {
        const q = parse(S.jobsQuery, Object.fromEntries(c.query));
        const jobs = (await stores.jobs.listUnfinished()).filter((j) => j.accountId === q.account);
        return { object: 'list', data: jobs.map((j) => ({ ...jobView(j), account: j.accountId, key: j.keyId })) };
      },
    },
    {
      method: 'GET',
      path: '/jobs/{id}',
      summary: 'A job (any status)',
      async run(c) {
        const j = await stores.jobs.get(c.params.id!);
        if (!j) throw notFound('job', c.params.id!);
        return { ...jobView(j), account: j.accountId, key: j.keyId };
      },
    },
  ];

  function contentRoutes(): AdminRoute[] {
    return [
      {
        method: 'GET',
        path: '/accounts/{id}/brands',
        summary: 'An account’s brands',
        async run(c) {
          await account(c.params.id!);
          return { object: 'list', data: await stores.content.listBrands(c.params.id!) };
        },
      },
      {
        method: 'GET',
        path: '/accounts/{id}/brands/{brand}',
        summary: 'A brand',
        async run(c) {
          const b = await stores.content.getBrand(c.params.id!, c.params.brand!);
          if (!b) throw notFound('brand', c.params.brand!);
          return b;
        },
      },
      {
        method: 'PUT',
        path: '/accounts/{id}/brands/{brand}',
        summary: 'Create or replace a brand',
        body: S.brandBody,
        async run(c) {
          const b = parse(S.brandBody, await c.body());
          await account(c.params.id!);
          await admin.putBrand({ ...b, id: c.params.brand!, account: c.params.id! });
          return stores.content.getBrand(c.params.id!, c.params.brand!);
        },
      },
      {
        method: 'DELETE',
        path: '/accounts/{id}/brands/{brand}',
        summary: 'Delete a brand',
        async run(c) {
          if (!(await admin.deleteBrand(c.params.id!, c.params.brand!))) throw notFound('brand', c.params.brand!);
          return { id: c.params.brand, deleted: true };
        },
      },
      {
        method: 'GET',
        path: '/accounts/{id}/documents',
        summary: 'An account’s knowledge documents (without their text)',
        async run(c) {
          await account(c.params.id!);
          const docs = await stores.content.listDocuments(c.params.id!);
          return { object: 'list', data: docs.map(({ text, ...d }) => ({ ...d, bytes: Buffer.byteLength(text) })) };
        },
      },
      {
        method: 'GET',
        path: '/accounts/{id}/documents/{doc}',
        summary: 'A knowledge document',
        async run(c) {
          const d = await stores.content.getDocument(c.params.id!, c.params.doc!);
          if (!d) throw notFound('document', c.params.doc!);
          return d;
        },
      },
      {
        method: 'PUT',
        path: '/accounts/{id}/documents/{doc}',
        summary: 'Create or replace a knowledge document',
        body: S.documentBody,
        async run(c) {
          const b = parse(S.documentBody, await c.body());
          await account(c.params.id!);
          await admin.addDocument({ ...b, id: c.params.doc!, account: c.params.id! });
          return stores.content.getDocument(c.params.id!, c.params.doc!);
        },
      },
      {
        method: 'DELETE',
        path: '/accounts/{id}/documents/{doc}',
        summary: 'Delete a knowledge document',
        async run(c) {
          if (!(await admin.deleteDocument(c.params.id!, c.params.doc!))) throw notFound('document', c.params.doc!);
          return { id: c.params.doc, deleted: true };
        },
      },
    ];
  }

  function exportResponse(format: 'csv' | 'jsonl', filter: Parameters<typeof ledgerEntries>[1]): Response {
    const encoder = new TextEncoder();
    const entries = ledgerEntries(admin, filter);
    const header = ledgerHeader(format);
    const stream = new ReadableStream<Uint8Array>({
      start(ctrl) {
        if (header) ctrl.enqueue(encoder.encode(header));
      },
      async pull(ctrl) {
        const lines: string[] = [];
        for (let i = 0; i < 500; i++) {
          const r = await entries.next();
          if (r.done) break;
          lines.push(ledgerLine(r.value, format));
        }
        if (lines.length) ctrl.enqueue(encoder.encode(lines.join('')));
        if (lines.length < 500) ctrl.close();
      },
    });
    return new Response(stream, {
      status: 200,
      headers: { 'content-type': format === 'csv' ? 'text/csv; charset=utf-8' : 'application/x-ndjson' },
    });
  }

  const compiled = routes.map((r) => {
    const names: string[] = [];
    const pattern = new RegExp(
      `^${r.path.replace(/\{(\w+)\}/g, (_, n: string) => {
        names.push(n);
        return '([^/]+)';
      })}$`,
    );
    return { r, names, pattern };
  });

  /** Answers `sub` (the path after /admin/v1). Throws GatewayError for refusals. */
  async function route(request: Request, sub: string, query: string): Promise<Response> {
    if (sub === '/openapi.json' && (request.method === 'GET' || request.method === 'HEAD')) return json(200, openApi());
    const matches = compiled.filter((c) => c.pattern.test(sub));
    if (matches.length === 0) throw new GatewayError('not_found', `Unknown route ${request.method} /admin/v1${sub.slice(0, 200)}.`);
    authorize(request);
    const hit = matches.find((c) => c.r.method === request.method);
    if (!hit) {
      throw new GatewayError('method_not_allowed', `Method ${request.method} is not allowed on /admin/v1${sub}.`, {
        headers: { allow: matches.map((c) => c.r.method).join(', ') },
      });
    }
    const m = hit.pattern.exec(sub)!;
    const params: Record<string, string> = {};
    hit.names.forEach((n, i) => {
      const raw = m[i + 1] ?? '';
      try {
        params[n] = decodeURIComponent(raw);
      } catch {
        params[n] = raw;
      }
    });
    const call: Call = {
      request,
      params,
      query: new URLSearchParams(query),
      body: async () => parseJsonObject(await readBody(request, core.cfg.limits.maxBodyBytes, core.cfg.limits.bodyTimeoutMs)),
    };
    let result: unknown;
    try {
      result = await hit.r.run(call);
    } catch (err) {
      // The admin's own refusals (no such account, a bad amount or time) are the caller's mistake.
      if (err instanceof AdminError || err instanceof RangeError) throw new GatewayError('invalid_request', err.message);
      throw err;
    }
    return result instanceof Response ? result : json(hit.r.status ?? 200, result, { 'cache-control': 'no-store' });
  }

  let doc: unknown;
  /** The OpenAPI 3.1 document, generated from the route declarations and their zod schemas. */
  function openApi(): unknown {
    if (doc) return doc;
    const paths: Record<string, Record<string, unknown>> = {};
    const errorRef = { $ref: '#/components/responses/Error' };
    for (const { r, names } of compiled) {
      const op: Record<string, unknown> = {
        summary: r.summary,
        operationId: `${r.method.toLowerCase()}${r.path.replace(/\{(\w+)\}/g, 'By_$1').replace(/[^A-Za-z0-9]+(.)?/g, (_, ch: string | undefined) => (ch ?? '').toUpperCase())}`,
        security: [{ adminToken: [] }],
        parameters: [
          ...names.map((n) => ({ name: n, in: 'path', required: true, schema: { type: 'string' } })),
          ...(r.query ? queryParameters(r.query) : []),
        ],
        responses: {
          [String(r.status ?? 200)]: { description: 'OK', content: { 'application/json': { schema: { type: 'object' } } } },
          '400': errorRef,
          '401': errorRef,
          '404': errorRef,
        },
      };
      if (r.body) op.requestBody = { required: true, content: { 'application/json': { schema: z.toJSONSchema(r.body, { io: 'input' }) } } };
      const p = `/admin/v1${r.path}`;
      (paths[p] ??= {})[r.method.toLowerCase()] = op;
    }
    doc = {
      openapi: '3.1.0',
      info: { title: `${core.cfg.serviceName} admin API`, version: '1' },
      paths,
      components: {
        securitySchemes: { adminToken: { type: 'http', scheme: 'bearer' } },
        responses: {
          Error: {
            description: 'The error envelope',
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  required: ['error'],
                  properties: {
                    error: {
                      type: 'object',
                      required: ['message', 'type', 'code', 'param'],
                      properties: {
                        message: { type: 'string' },
                        type: { type: 'string' },
                        code: { type: ['string', 'null'] },
                        param: { type: ['string', 'null'] },
                        metadata: { type: 'object' },
                      },
                    },
                  },
                },
              },
            },
          },
        },
      },
    };
    return doc;
  }

  /**
   * Handles a request whose path starts with /admin: the console's pages and assets, or the
   * API. Every refusal is the error envelope.
   */
  async function handle(request: Request, path: string, query: string, requestId: string): Promise<Response> {
    try {
      if (path === '/admin' || path === '/admin/' || (path.startsWith('/admin/') && !path.startsWith('/admin/v1/') && path !== '/admin/v1')) {
        const asset = await consoleAsset(path.slice('/admin'.length) || '/');
        if (!asset) throw new GatewayError('not_found', `Unknown route ${request.method} ${path.slice(0, 200)}.`);
        if (request.method !== 'GET' && request.method !== 'HEAD') {
          throw new GatewayError('method_not_allowed', `Method ${request.method} is not allowed on ${path}.`, { headers: { allow: 'GET, HEAD' } });
        }
        return asset;
      }
      const res = await route(request, path.slice('/admin/v1'.length), query);
      res.headers.set('x-request-id', requestId);
      return res;
    } catch (err) {
      if (err instanceof GatewayError) return errorResponse(err, requestId);
      if (isStoreUnavailable(err)) {
        return errorResponse(new GatewayError('service_unavailable', 'A store is unreachable. Try again shortly.', { headers: { 'retry-after': '1' } }), requestId);
      }
      core.log.error({ msg: 'admin API: unexpected error', requestId, err });
      return errorResponse(new GatewayError('internal_error', `Internal error. Quote request id ${requestId} when reporting it.`), requestId);
    }
  }

  return { handle, openApi };
}

/** OpenAPI query parameters from a zod object schema. */
function queryParameters(schema: z.ZodType): unknown[] {
  const js = z.toJSONSchema(schema, { io: 'input' }) as { properties?: Record<string, unknown>; required?: string[] };
  return Object.entries(js.properties ?? {}).map(([name, s]) => ({ name, in: 'query', required: js.required?.includes(name) ?? false, schema: s }));
}

/** A ledger entry on the wire: exact USD strings, never bigints. */
export function entryView(e: import('../stores/types.js').LedgerEntry) {
  return {
    id: e.id,
    account: e.accountId,
    key: e.keyId || null,
    model: e.model || null,
    units: e.units,
    costUsd: formatUsd(e.cost),
    heldUsd: formatUsd(e.held),
    exceededHold: e.exceededHold,
    measured: e.measured,
    upstream: e.upstream ?? null,
    at: e.at,
  };
}
