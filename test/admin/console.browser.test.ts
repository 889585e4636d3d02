/**
 * The web console in real headless Chromium: sign in with the admin token, see the spend
 * chart drawn from seeded spend, disable a key and see calls with it refused (401); set a
 * key's monthly cap, an account's grants and a signed adjustment through the UI; rotate a key
 * (the new secret works, the old one is refused) and see the secret cleared on choosing
 * another account; set a key's model allow-list, tokens per minute and budgets and an account's
 * budgets (a model outside the allow-list is then 403); see a guardrail's block in the recent
 * blocks. Screenshots go to test/artifacts/
 * (git-ignored).
 */
import { mkdirSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { launchChromium } from './chromium.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';

const ARTIFACTS = new URL('../artifacts/', import.meta.url).pathname;
let browser: Browser;
let gw: RunningGateway;
const setup = testConfig({ walletUsd: 50 });
// One guardrail, for the recent-blocks table: only a prompt naming the phrase is refused.
setup.options.guardrails = [{ id: 'codenames', kind: 'regex', patterns: ['project\\s+nightfall'], ignoreCase: true, action: 'block' }];

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  gw = await startGateway({ ...setup.options, admin: { tokenSha256: ADMIN_SHA } });
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await gw?.close();
});

/** Opens the console signed in, with `account` chosen when given. */
async function signIn(page: Page, account?: string): Promise<void> {
  await page.goto(`${gw.origin}/admin`);
  await page.fill('#token', ADMIN_TOKEN);
  await page.click('#signin-button');
  await page.waitForSelector('body[data-loaded]');
  if (account === undefined) return;
  await page.click(`#accounts tr[data-account="${account}"]`);
  await page.waitForFunction((id) => document.querySelector('#account-name')?.textContent === id, account);
}

it('lists a guardrail block among the recent blocks', async () => {
  const res = await postChat(gw.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'tell me about Project Nightfall' }], max_tokens: 20 });
  expect(res.status).toBe(400);
  const requestId = res.headers.get('x-request-id') ?? '';
  expect(requestId).toMatch(/^req_/);
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  try {
    await signIn(page);
    const row = page.locator(`#guardrail-blocks tr[data-request="${requestId}"]`);
    await row.waitFor({ timeout: 10_000 });
    const text = await row.textContent();
    for (const part of ['codenames', 'input', setup.account, MODEL, '/chat/completions']) expect(text).toContain(part);
  } finally {
    await page.close();
  }
}, 60_000);

it('signs in, draws the spend chart, disables a key (then 401)', async () => {
  // Seeded spend: a few real calls with the developer key.
  for (let i = 0; i < 3; i++) {
    expect((await postChat(gw.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 20 })).status).toBe(200);
  }
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await page.goto(`${gw.origin}/admin`);
  await page.fill('#token', 'not-the-token');
  await page.click('#signin-button');
  await page.waitForSelector('#signin-error:has-text("not accepted")');
  await page.fill('#token', ADMIN_TOKEN);
  await page.click('#signin-button');
  await page.waitForSelector('body[data-loaded]');
  await page.waitForSelector('#spend-chart canvas');
  expect(await page.getAttribute('#spend-chart', 'data-points')).toBe('1');
  // The bar was painted: some canvas pixel is not transparent.
  const painted = await page.evaluate(() => {
    const c = document.querySelector('#spend-chart canvas') as HTMLCanvasElement;
    const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i]! > 0) n++;
    return n;
  });
  expect(painted).toBeGreaterThan(100);
  expect(await page.textContent('#by-model tbody')).toContain(MODEL);
  // Three calls cost a fraction of a cent: the text rounds to 50.00, its title is exact.
  expect(await page.textContent('#balance')).toBe('50.00');
  expect(Number((await page.getAttribute('#balance', 'title'))?.replace(/ USD$/, ''))).toBeLessThan(50);
  expect(await page.locator('#ledger tbody tr').count()).toBe(4); // the opening balance and the three calls
  await page.screenshot({ path: `${ARTIFACTS}console-signed-in.png`, fullPage: true });

  const devId = (await gw.gateway.admin.listKeys(setup.account)).find((k) => k.kind === 'developer')!.id;
  const row = page.locator(`#keys tr[data-key="${devId}"]`);
  await row.locator('button.disable').click();
  await page.waitForSelector(`#keys tr[data-key="${devId}"] button.enable`);
  expect(await row.textContent()).toContain('disabled');
  await page.screenshot({ path: `${ARTIFACTS}console-key-disabled.png`, fullPage: true });
  expect((await postChat(gw.baseURL, setup.devKey, { model: MODEL, messages: [{ role: 'user', content: 'x' }] })).status).toBe(401);
  await page.close();
}, 60_000);

it('sets a cap, grants and an adjustment; rotates a key, whose secret is cleared on choosing another account', async () => {
  await gw.gateway.admin.createAccount({ id: 'other-co', walletUsd: 1 });
  const agentId = (await gw.gateway.admin.listKeys(setup.account)).find((k) => k.kind === 'agent')!.id;
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('dialog', (d) => void d.accept());
  try {
    await signIn(page, setup.account);
    const row = page.locator(`#keys tr[data-key="${agentId}"]`);

    await row.locator('input.cap').fill('7.5');
    await row.locator('button.set-cap').click();
    await page.waitForFunction((id) => document.querySelector(`#keys tr[data-key="${id}"]`)?.textContent?.includes('7.5'), agentId);
    expect((await gw.gateway.admin.getKey(agentId))?.monthlyCapUsd).toBe('7.5');

    await page.fill('#grants', `${MODEL}, other/model`);
    await page.click('#grants-save');
    await expect.poll(async () => (await gw.stores.accounts.get(setup.account))?.grants).toEqual([MODEL, 'other/model']);

    // The balance shows cents; its title holds the exact figure.
    const exactBalance = async () => Number((await page.getAttribute('#balance', 'title'))?.replace(/ USD$/, ''));
    const before = await exactBalance();
    await page.selectOption('#credit-kind', 'adjustments');
    await page.fill('#credit-amount', '-1.25');
    await page.fill('#credit-reason', 'refund reversal');
    await page.click('#credit-submit');
    await page.waitForFunction((b) => document.querySelector('#balance')?.getAttribute('title') !== b, `${before} USD`);
    expect(await exactBalance()).toBeCloseTo(before - 1.25, 9);
    // The ledger is oldest first: the adjustment is the newest entry, the last row.
    expect(await page.textContent('#ledger tbody tr:last-child')).toContain('refund reversal');

    await row.locator('button.rotate').click();
    const secret = (await page.locator('#new-secret code.secret').textContent()) ?? '';
    expect(secret).toMatch(/^sk-mg-/);
    expect((await postChat(gw.baseURL, secret, { model: MODEL, messages: [{ role: 'user', content: 'x' }] })).status).toBe(200);
    expect((await postChat(gw.baseURL, setup.agentKey, { model: MODEL, messages: [{ role: 'user', content: 'x' }] })).status).toBe(401);
    await page.click('#accounts tr[data-account="other-co"]');
    await page.waitForFunction(() => document.querySelector('#account-name')?.textContent === 'other-co');
    expect(await page.locator('#new-secret code.secret').count()).toBe(0);
    expect(await page.textContent('#new-secret')).toBe('');
    await page.screenshot({ path: `${ARTIFACTS}console-changes.png`, fullPage: true });
  } finally {
    await page.close();
  }
}, 60_000);

it('a top-up sent twice before its answer (a double click, a second Enter) credits once; the next one is its own', async () => {
  await gw.gateway.admin.createAccount({ id: 'twice-co', walletUsd: 0 });
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  try {
    await signIn(page, 'twice-co');
    await page.fill('#credit-amount', '100');
    await page.fill('#credit-reason', 'invoice 12');
    // Both submits leave before either answer comes back.
    await page.evaluate(() => {
      const form = document.getElementById('credit-form') as HTMLFormElement;
      form.requestSubmit();
      form.requestSubmit();
    });
    await page.waitForFunction(() => (document.getElementById('credit-amount') as HTMLInputElement).value === '');
    const credits = async () => (await gw.gateway.admin.ledger('twice-co')).filter((e) => e.units.kind === 'credit');
    await expect.poll(async () => (await credits()).length).toBe(1);
    expect((await gw.gateway.admin.wallet('twice-co')).balanceUsd).toBe('100');
    // The same credit meant again, after the first was applied, is a new one.
    await page.fill('#credit-amount', '100');
    await page.fill('#credit-reason', 'invoice 12');
    await page.click('#credit-submit');
    await expect.poll(async () => (await gw.gateway.admin.wallet('twice-co')).balanceUsd).toBe('200');
    expect(await credits()).toHaveLength(2);
  } finally {
    await page.close();
  }
}, 60_000);

it('sets a key’s model allow-list, tokens per minute and daily budget, and an account’s budgets', async () => {
  await gw.gateway.admin.createAccount({ id: 'limits-co', walletUsd: 5 });
  const adminGet = async (path: string) => {
    const res = await fetch(`${gw.origin}/admin/v1${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(res.status).toBe(200);
    return res.json();
  };
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  try {
    await signIn(page, 'limits-co');

    // A budget that does not read is refused in the page, and nothing is created.
    await page.fill('#key-label', 'limited');
    await page.fill('#key-models', 'other/*');
    await page.fill('#key-tokensPerMinute', '1200');
    await page.fill('#key-budgets', 'two dollars a day');
    await page.click('#create-key');
    await page.waitForSelector('#notice:has-text("budgets")');
    expect(await gw.gateway.admin.listKeys('limits-co')).toEqual([]);

    await page.fill('#key-budgets', '2/day');
    await page.click('#create-key');
    const secret = (await page.locator('#new-secret code.secret').textContent()) ?? '';
    expect(secret).toMatch(/^sk-mg-/);
    const keyId = (await page.getAttribute('#new-secret', 'data-key'))!;
    const key = await adminGet(`/keys/${keyId}`);
    expect(key).toMatchObject({ label: 'limited', models: ['other/*'], tokensPerMinute: 1200, budgets: [{ period: 'day' }] });
    expect(Number(key.budgets[0].usd)).toBe(2);
    const row = page.locator(`#keys tr[data-key="${keyId}"]`);
    await page.waitForFunction((id) => document.querySelector(`#keys tr[data-key="${id}"] td.limits`)?.textContent?.includes('other/*'), keyId);
    expect(await row.locator('td.limits').textContent()).toContain('tpm: 1200');

    // The allow-list holds: a model outside it is refused before anything is billed.
    const refused = await postChat(gw.baseURL, secret, { model: MODEL, messages: [{ role: 'user', content: 'x' }] });
    expect(refused.status).toBe(403);
    expect((await refused.json()).error).toMatchObject({ code: 'model_not_allowed', param: 'model' });

    await page.fill('#account-budgets', '10/week, 30/month');
    await page.click('#budgets-save');
    await expect.poll(async () => (await adminGet('/accounts/limits-co')).budgets.map((b: { usd: string; period: string }) => [Number(b.usd), b.period]))
      .toEqual([[10, 'week'], [30, 'month']]);
    await page.waitForFunction(() => document.querySelector('#accounts tr[data-account="limits-co"]')?.textContent?.includes('10/week'));

    // Editing the key's limits in its row: the allow-list now names the model, so the call goes through.
    await row.locator('input.models').fill(MODEL);
    await row.locator('input.tpm').fill('');
    await row.locator('button.set-limits').click();
    await expect.poll(async () => (await gw.gateway.admin.getKey(keyId))?.models).toEqual([MODEL]);
    expect((await gw.gateway.admin.getKey(keyId))?.tokensPerMinute).toBeNull();
    expect((await postChat(gw.baseURL, secret, { model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 5 })).status).toBe(200);

    // An empty allow-list (no model at all, set through the API) reads as such, and a change of
    // another limit in the row leaves it: before, the empty input was sent as "every model".
    await gw.gateway.admin.setKeyLimits(keyId, { models: [] });
    // The page keeps its sign-in: reloaded, it reads the key again.
    await page.reload();
    await page.waitForSelector('body[data-loaded]');
    await page.click('#accounts tr[data-account="limits-co"]');
    await page.waitForFunction((id) => document.querySelector(`#keys tr[data-key="${id}"] td.limits`)?.textContent?.includes('models: none'), keyId);
    await row.locator('input.tpm').fill('5000');
    await row.locator('button.set-limits').click();
    await expect.poll(async () => (await gw.gateway.admin.getKey(keyId))?.tokensPerMinute).toBe(5000);
    expect((await gw.gateway.admin.getKey(keyId))?.models).toEqual([]);
    await page.waitForFunction((id) => document.querySelector(`#keys tr[data-key="${id}"] td.limits`)?.textContent?.includes('tpm: 5000'), keyId);
    await row.locator('input.models').fill(MODEL);
    await row.locator('button.set-limits').click();
    await expect.poll(async () => (await gw.gateway.admin.getKey(keyId))?.models).toEqual([MODEL]);

    // Each change went through the admin API, so the change log has it.
    const changes = JSON.stringify((await adminGet('/changes?limit=20')).data);
    expect(changes).toContain('/budgets');
    expect(changes).toContain('/limits');
    await page.screenshot({ path: `${ARTIFACTS}console-limits.png`, fullPage: true });
  } finally {
    await page.close();
  }
}, 60_000);
