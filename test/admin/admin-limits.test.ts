/**
 * The admin HTTP API sets a key's model allow-list, tokens per minute and budgets, and an
 * account's budgets; bad input is 400 naming the field; the gateway enforces what was set.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNT, MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';

describe('admin API: limits beyond the monthly cap', () => {
  let gw: RunningGateway;
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${gw.origin}/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as any };
  };

  beforeAll(async () => {
    const setup = testConfig({ models: [{ id: 'acme/one', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000001' } }] });
    gw = await startGateway({ ...setup.options, admin: { tokenSha256: ADMIN_SHA } });
  });
  afterAll(() => gw?.close());

  it('creates a key with its limits, patches them field by field, and the gateway applies them', async () => {
    const created = await api('POST', '/keys', {
      account: ACCOUNT,
      models: ['acme/*'],
      tokensPerMinute: 40_000,
      budgets: [{ usd: '2.5', period: 'day' }],
    });
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({ models: ['acme/*'], tokensPerMinute: 40_000, budgets: [{ usd: '2.5', period: 'day' }] });
    const { id, key } = created.json as { id: string; key: string };

    const refused = await postChat(gw.baseURL, key, { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    expect(refused.status).toBe(403);
    const ok = await postChat(gw.baseURL, key, { model: 'acme/one', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-ratelimit-limit-tokens')).toBe('40000');
    const before = await fetch(`${gw.baseURL}/key`, { headers: { authorization: `Bearer ${key}` } });
    expect(((await before.json()) as any).data.rate_limit).toMatchObject({ tokens: 40_000, interval: '60s' });

    const patched = await api('PUT', `/keys/${id}/limits`, { tokensPerMinute: null, budgets: [{ usd: 1, period: 'week' }] });
    expect(patched.status).toBe(200);
    expect(patched.json).toMatchObject({ models: ['acme/*'], tokensPerMinute: null, budgets: [{ usd: '1', period: 'week' }] });
    const view = await fetch(`${gw.baseURL}/key`, { headers: { authorization: `Bearer ${key}` } });
    expect(((await view.json()) as any).data).toMatchObject({ limit: 1, limit_reset: 'weekly' });

    const bad = await api('PUT', `/keys/${id}/limits`, { budgets: [{ usd: '1', period: 'year' }] });
    expect(bad.status).toBe(400);
    expect(bad.json.error.param).toMatch(/^budgets/);
    const badModels = await api('PUT', `/keys/${id}/limits`, { models: ['a*b'] });
    expect(badModels.status).toBe(400);
    expect(badModels.json.error.param).toMatch(/^models/);
  });

  it("sets an account's budgets, shown with the account", async () => {
    const created = await api('POST', '/accounts', { id: 'acct_budgeted', walletUsd: 5, budgets: [{ usd: '3', period: 'month' }] });
    expect(created.status).toBe(201);
    expect(created.json.budgets).toEqual([{ usd: '3', period: 'month' }]);
    const set = await api('PUT', '/accounts/acct_budgeted/budgets', { budgets: [{ usd: '0.5', period: 'day' }] });
    expect(set.status).toBe(200);
    expect(set.json.budgets).toEqual([{ usd: '0.5', period: 'day' }]);
    expect((await api('PUT', '/accounts/nobody/budgets', { budgets: [] })).status).toBe(404);
  });
});
