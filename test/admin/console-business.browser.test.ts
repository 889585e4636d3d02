/**
 * The console runs the business, in real headless Chromium over SQLite books: the sign-in page
 * says where the admin token comes from; money shows to the cent with the exact figure on
 * hover; the ledger and recent requests page; a key is deleted (then 401); a 403
 * model_not_allowed fills the Model column and the Refused count; auto-refresh shows a new
 * request without a click; the audit page reports clean books, then the difference after the
 * books are changed behind the gateway. At 420 px wide the page does not scroll sideways:
 * each wide table scrolls inside its own box, dates stay on one line, the chart fits.
 * Screenshots (desktop and 420 px) go to a temporary directory named in the output.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';
import { MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { launchChromium } from './chromium.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';

const SHOTS = mkdtempSync(join(tmpdir(), 'mg-console-shots-'));
const dir = mkdtempSync(join(tmpdir(), 'mg-console-books-'));
const DB = join(dir, 'books.db');
let browser: Browser;
let gw: RunningGateway;
const setup = testConfig({ walletUsd: 50 });

beforeAll(async () => {
  console.log(`console screenshots in ${SHOTS}`);
  gw = await startGateway({ ...setup.options, stores: createSqliteStores({ path: DB }), admin: { tokenSha256: ADMIN_SHA } });
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await gw?.stores.close();
  rmSync(dir, { recursive: true, force: true });
});

const chat = (key: string, model = MODEL) => postChat(gw.baseURL, key, { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });

async function signIn(page: Page): Promise<void> {
  await page.goto(`${gw.origin}/admin`);
  await page.fill('#token', ADMIN_TOKEN);
  await page.click('#signin-button');
  await page.waitForSelector('body[data-loaded]');
}

/** Waits for the next completed refresh of the whole page. */
async function reloaded(page: Page, after: () => Promise<unknown>): Promise<void> {
  const before = await page.getAttribute('body', 'data-loaded');
  await after();
  await page.waitForFunction((b) => document.body.dataset.loaded !== b, before);
}

/** Clicks a pager button and waits until the page it names is drawn. */
async function turn(page: Page, button: string, label: string): Promise<void> {
  await page.click(`#${button}`);
  await page.waitForFunction(([id, text]) => document.getElementById(id!)?.textContent === text, [button.replace(/-(next|prev)$/, '-page'), label]);
}

it('sign-in says where the admin token comes from (420 px)', async () => {
  const page = await browser.newPage({ viewport: { width: 420, height: 800 } });
  await page.goto(`${gw.origin}/admin`);
  const help = (await page.textContent('#signin-help')) ?? '';
  expect(help).toContain('admin.tokenSha256');
  expect(help).toContain('start line');
  await page.screenshot({ path: join(SHOTS, 'signin-420.png'), fullPage: true });
  await page.close();
});

it('money to cents with the exact figure on hover; paged ledger and requests; 403 in Model and Refused; key delete', async () => {
  // Books worth paging: 30 adjustments of odd amounts, then 30 calls.
  for (let i = 0; i < 30; i++) await gw.gateway.admin.credit(setup.account, { amountUsd: `-0.01234567${i % 10}`, reason: `adjustment ${i}` });
  for (let i = 0; i < 30; i++) expect((await chat(setup.devKey)).status).toBe(200);
  const { key: narrow, id: narrowId } = await gw.gateway.admin.createKey({ account: setup.account, label: 'narrow', models: ['other/*'] });
  const refused = await chat(narrow);
  expect(refused.status).toBe(403);
  const refusedId = refused.headers.get('x-request-id')!;

  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('dialog', (d) => void d.accept());
  await signIn(page);
  const exactBalance = (await gw.gateway.admin.wallet(setup.account)).balanceUsd;
  expect(exactBalance).toMatch(/\.\d{3,}$/);
  expect(await page.textContent('#balance')).toMatch(/^\d+\.\d\d$/);
  expect(await page.getAttribute('#balance', 'title')).toBe(`${exactBalance} USD`);
  expect(Math.abs(Number(await page.textContent('#balance')) - Number(exactBalance))).toBeLessThanOrEqual(0.005);
  // A call's cost is a fraction of a cent: "<0.01", the exact figure on hover (the newest row
  // is the refused call, which cost nothing; the next one is a charged call).
  const cost = page.locator('#requests tbody tr').nth(1).locator('td.money');
  expect(await cost.textContent()).toBe('<0.01');
  expect(await cost.getAttribute('title')).toMatch(/^0\.0+\d+ USD$/);

  // The ledger: 1 opening balance + 30 adjustments + 30 charges = 61 entries, 25 a page.
  expect(await page.locator('#ledger tbody tr').count()).toBe(25);
  expect(await page.textContent('#ledger tbody tr:first-child')).toContain('opening balance');
  await turn(page, 'ledger-next', 'page 2');
  expect(await page.locator('#ledger tbody tr').count()).toBe(25);
  await turn(page, 'ledger-next', 'page 3');
  expect(await page.locator('#ledger tbody tr').count()).toBe(11);
  expect(await page.isDisabled('#ledger-next')).toBe(true);
  await turn(page, 'ledger-prev', 'page 2');
  expect(await page.locator('#ledger tbody tr').count()).toBe(25);

  // Recent requests: newest first, 25 a page; the 403 is first, its model named.
  const first = page.locator('#requests tbody tr').first();
  expect(await first.getAttribute('data-request')).toBe(refusedId);
  expect(await first.locator('td').nth(6).textContent()).toBe(MODEL);
  const stats = page.locator('#model-stats tbody tr', { hasText: MODEL });
  expect(Number(await stats.locator('td').last().textContent())).toBeGreaterThanOrEqual(1);
  expect(await page.locator('#requests tbody tr').count()).toBe(25);
  const pageOne = await page.locator('#requests tbody tr').evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.request));
  await turn(page, 'requests-next', 'page 2');
  const pageTwo = await page.locator('#requests tbody tr').evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.request));
  expect(pageTwo).toHaveLength(6); // 31 requests in all
  expect(pageTwo.some((id) => pageOne.includes(id))).toBe(false);
  // At desktop width the keys table fits its box: every key's buttons are in view.
  const keysBox = await page.evaluate(() => {
    const box = document.getElementById('keys')!.parentElement!;
    return { scroll: box.scrollWidth, client: box.clientWidth };
  });
  expect(keysBox.scroll).toBeLessThanOrEqual(keysBox.client);
  await page.screenshot({ path: join(SHOTS, 'console-1280.png'), fullPage: true });
  for (const table of ['requests', 'keys', 'ledger']) await page.locator(`section:has(#${table})`).screenshot({ path: join(SHOTS, `${table}-1280.png`) });

  // Delete the narrow key: its row goes, its secret is refused.
  await reloaded(page, () => page.locator(`#keys tr[data-key="${narrowId}"] button.delete`).click());
  expect(await page.locator(`#keys tr[data-key="${narrowId}"]`).count()).toBe(0);
  expect(await gw.gateway.admin.getKey(narrowId)).toBeNull();
  expect((await chat(narrow)).status).toBe(401);
  await page.close();
}, 90_000);

it('auto-refresh shows a new request without a click', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await signIn(page);
  await page.check('#auto-refresh');
  const res = await chat(setup.devKey);
  const id = res.headers.get('x-request-id')!;
  await page.waitForSelector(`#requests tr[data-request="${id}"]`, { timeout: 15_000 });
  // Unticked, nothing changes by itself.
  await page.uncheck('#auto-refresh');
  const stamp = await page.getAttribute('body', 'data-loaded');
  await page.waitForTimeout(11_000);
  expect(await page.getAttribute('body', 'data-loaded')).toBe(stamp);
  await page.close();
}, 60_000);

it('the audit page: clean books, then the difference made behind the gateway', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await signIn(page);
  await page.click('#run-audit');
  await page.waitForSelector('#audit-panel[data-ok="true"]');
  expect(await page.textContent('#audit-result')).toMatch(/^The books add up: \d+ accounts, \d+ ledger entries, no differences\.$/);
  expect(await page.isHidden('#audit')).toBe(true);

  const db = new Database(DB);
  db.prepare('UPDATE wallets SET balance = balance + 7000000000 WHERE account_id = ?').run(setup.account);
  db.close();
  await page.click('#run-audit');
  await page.waitForSelector('#audit-panel[data-ok="false"]');
  expect(await page.textContent('#audit-result')).toMatch(/^1 differences in/);
  const row = page.locator('#audit tbody tr');
  expect(await row.count()).toBe(1);
  expect(await row.locator('td').nth(0).textContent()).toBe(setup.account);
  expect(await row.locator('td').nth(1).textContent()).toBe('balance');
  await page.locator('#audit-panel').screenshot({ path: join(SHOTS, 'audit-1280.png') });
  await page.close();
}, 60_000);

it('at 420 px: no sideways page scroll; tables scroll in their own box, dates on one line, the chart fits', async () => {
  const page = await browser.newPage({ viewport: { width: 420, height: 900 } });
  await signIn(page);
  await page.waitForSelector('#spend-chart canvas');
  const layout = await page.evaluate(() => {
    const box = (id: string) => document.getElementById(id)!.parentElement!;
    const requests = box('requests');
    const time = document.querySelector('#requests tbody td') as HTMLElement;
    const chart = document.querySelector('#spend-chart canvas') as HTMLCanvasElement;
    const section = document.getElementById('overview')!;
    return {
      pageWidth: document.documentElement.scrollWidth,
      requestsScrolls: requests.scrollWidth > requests.clientWidth,
      requestsBox: requests.getBoundingClientRect().right,
      overflowX: getComputedStyle(requests).overflowX,
      timeHeight: time.getBoundingClientRect().height,
      chartRight: chart.getBoundingClientRect().right,
      sectionRight: section.getBoundingClientRect().right,
    };
  });
  expect(layout.pageWidth).toBeLessThanOrEqual(420);
  expect(layout.overflowX).toBe('auto');
  expect(layout.requestsScrolls).toBe(true);
  expect(layout.requestsBox).toBeLessThanOrEqual(420);
  expect(layout.timeHeight).toBeLessThan(30); // one line
  expect(layout.chartRight).toBeLessThanOrEqual(layout.sectionRight);
  for (const table of ['requests', 'keys', 'ledger']) await page.locator(`section:has(#${table})`).screenshot({ path: join(SHOTS, `${table}-420.png`) });
  // The table's last column is reachable by scrolling its box.
  await page.evaluate(() => {
    const box = document.getElementById('requests')!.parentElement!;
    box.scrollLeft = box.scrollWidth;
  });
  expect(await page.locator('#requests tbody tr').first().locator('td').last().isVisible()).toBe(true);
  await page.screenshot({ path: join(SHOTS, 'console-420.png'), fullPage: true });
  await page.screenshot({ path: join(SHOTS, 'console-420-top.png') });
  await page.close();
}, 60_000);
