/**
 * Durable books on SQLite: a gateway restarted (politely or with kill -9) keeps every settled
 * charge, its wallets, keys and ledger; seeding never credits twice; the ledger is queryable
 * through the admin API and exportable with the CLI. The wallet race runs against one CLI
 * process on a real SQLite file.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdminError } from '../../src/admin/accounts.js';
import { createGateway } from '../../src/gateway.js';
import { ConfigError } from '../../src/options.js';
import { silentLogger } from '../../src/observability/log.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { LedgerEntry } from '../../src/stores/types.js';
import { chatCost, worstCaseHold } from '../helpers/billing.js';
import { ACCOUNT, COMPLETION_PRICE, MODEL, PROMPT_PRICE, eventually, testConfig, testKey } from '../helpers/gateway.js';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/processes.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const ROOT = join(import.meta.dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'mg-durable-'));
const messages = [{ role: 'user', content: 'hi' }];
const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
/** What one call with the test upstream's usage costs, in nano-USD. */
const CALL = chatCost(USAGE.prompt_tokens, USAGE.completion_tokens);

let upstream: TestUpstream;
beforeAll(async () => {
  upstream = await startTestUpstream();
});
afterAll(async () => {
  await upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const chatRequest = (base: string, key: string, maxTokens = 50) =>
  new Request(`${base}/chat/completions`, { method: 'POST', headers: auth(key), body: JSON.stringify({ model: MODEL, messages, max_tokens: maxTokens }) });
const nano = (usd: number) => BigInt(Math.round(usd * 1e9));

/** A ledger's charges: without its credits (the opening balance, top-ups). */
const calls = (entries: LedgerEntry[]) => entries.filter((e) => e.units.kind !== 'credit');

describe('a gateway on SQLite (in process)', () => {
  it('a restarted gateway keeps wallets, spend, keys and the ledger, and seeding credits once', async () => {
    const path = join(dir, 'restart.db');
    const setup = testConfig({ upstreamUrl: upstream.url, walletUsd: 10 });
    const options = { ...setup.options, storage: { driver: 'sqlite' as const, path }, logger: silentLogger };
    upstream.setBehavior({ kind: 'json', content: 'ok', usage: USAGE });

    const first = createGateway(options);
    await first.ready;
    for (let i = 0; i < 3; i++) expect((await first.fetch(chatRequest('http://gw/v1', setup.devKey))).status).toBe(200);
    await eventually(async () => calls(await first.admin.ledger(ACCOUNT)).length === 3, 'three settles');
    const { key: created } = await first.admin.createKey({ account: ACCOUNT, label: 'made at run time' });
    await first.dispose();

    const second = createGateway(options);
    await second.ready;
    try {
      expect(await second.admin.wallet(ACCOUNT)).toEqual({ balanceUsd: String(10 - Number(3n * CALL) / 1e9), heldUsd: '0' });
      const ledger = await second.admin.ledger(ACCOUNT);
      expect(ledger.map((e) => e.cost)).toEqual([-10_000_000_000n, CALL, CALL, CALL]);
      const res = await second.fetch(new Request('http://gw/v1/key', { headers: auth(created) }));
      expect(res.status).toBe(200);
      const body = (await res.json()) as { data: { usage: number } };
      expect(body.data.usage).toBe(0);
    } finally {
      await second.dispose();
    }
  });

  it('admin.ledger pages by cursor, filters by key and time, and names bad input', async () => {
    const path = join(dir, 'query.db');
    const setup = testConfig({ upstreamUrl: upstream.url, walletUsd: 10 });
    const other = testKey();
    const gateway = createGateway({
      ...setup.options,
      keys: [...(setup.options.keys ?? []), { key: other, account: ACCOUNT }],
      storage: { driver: 'sqlite', path },
      logger: silentLogger,
    });
    await gateway.ready;
    try {
      upstream.setBehavior({ kind: 'json', content: 'ok', usage: USAGE });
      const t0 = Date.now();
      for (const key of [setup.devKey, other, setup.devKey, setup.devKey, other]) {
        expect((await gateway.fetch(chatRequest('http://gw/v1', key))).status).toBe(200);
      }
      await eventually(async () => calls(await gateway.admin.ledger(ACCOUNT)).length === 5, 'five settles');
      const otherId = ((await (await gateway.fetch(new Request('http://gw/v1/key', { headers: auth(other) }))).json()) as { data: { id: string } }).data.id;

      const seen: string[] = [];
      let page = await gateway.admin.ledger({ account: ACCOUNT, limit: 2 });
      for (;;) {
        seen.push(...page.entries.map((e) => e.id));
        if (!page.more) break;
        page = await gateway.admin.ledger({ account: ACCOUNT, limit: 2, cursor: page.nextCursor });
      }
      expect(seen).toEqual((await gateway.admin.ledger(ACCOUNT)).map((e) => e.id));
      const mine = await gateway.admin.ledger({ account: ACCOUNT, key: otherId, from: new Date(t0), to: Date.now() + 1 });
      expect(mine.entries.map((e) => e.keyId)).toEqual([otherId, otherId]);
      expect((await gateway.admin.ledger({ account: ACCOUNT, from: '2999-01-01' })).entries).toEqual([]);

      await expect(gateway.admin.ledger({ account: 'nobody' })).rejects.toThrow(/No account "nobody"/);
      await expect(gateway.admin.ledger({ account: ACCOUNT, from: 'last tuesday' })).rejects.toThrow(/from: not a time/);
      await expect(gateway.admin.ledger({ account: ACCOUNT, limit: 0 })).rejects.toThrow(/limit: must be an integer from 1 to 1000/);
      await expect(gateway.admin.ledger({ account: ACCOUNT, cursor: 'abc' })).rejects.toBeInstanceOf(AdminError);
    } finally {
      await gateway.dispose();
    }
  });

  it('seeding never credits an account that already has ledger history', async () => {
    const stores = createMemoryStores();
    // The account's record is gone but its books are not (an operator's mistake, a partial restore).
    const req = { holdId: 'h1', accountId: 'acct_spent', keyId: 'key_1', amount: 0n, monthlyCap: null, month: '2025-01', ttlMs: 60_000 };
    await stores.billing.placeHold(req);
    await stores.billing.settle({
      holdId: 'h1',
      accountId: 'acct_spent',
      month: '2025-01',
      cost: 700n,
      entry: { id: 'req_1', accountId: 'acct_spent', keyId: 'key_1', model: MODEL, units: { kind: 'tokens', prompt: 1, completion: 1 }, measured: 'usage', at: 1 },
    });
    const gateway = createGateway({
      accounts: [
        { id: 'acct_spent', walletUsd: 10 },
        { id: 'acct_new', walletUsd: 10 },
      ],
      stores,
      logger: silentLogger,
    });
    await gateway.ready;
    try {
      expect(await gateway.admin.wallet('acct_spent')).toEqual({ balanceUsd: '-0.0000007', heldUsd: '0' });
      expect(await gateway.admin.wallet('acct_new')).toEqual({ balanceUsd: '10', heldUsd: '0' });
    } finally {
      await gateway.dispose();
    }
  });

  it('storage drivers that connect asynchronously need their stores: the type says so, and createGateway refuses at once', () => {
    // @ts-expect-error: a PostgreSQL storage needs `stores` built first
    expect(() => createGateway({ storage: { driver: 'postgres', url: 'postgres://x/y' } })).toThrow(/createStores\(storage\)/);
    // @ts-expect-error: so does a Redis storage
    expect(() => createGateway({ storage: { driver: 'redis', url: 'redis://127.0.0.1:6379' } })).toThrow(ConfigError);
    // @ts-expect-error: and SQLite with limits from Redis
    expect(() => createGateway({ storage: { driver: 'sqlite', path: join(dir, 'x.db'), limits: { driver: 'redis' } } })).toThrow(
      /limits from Redis/,
    );
    // @ts-expect-error: a PostgreSQL storage always needs its url
    expect(() => createGateway({ storage: { driver: 'postgres' }, stores: createMemoryStores() })).toThrow(/storage\.url: missing/);
    expect(() => createGateway({ storage: { driver: 'postgres', url: 'postgres://x/y', schema: 'Bad-Name' }, stores: createMemoryStores() })).toThrow(
      /storage.schema: must be a lower-case identifier/,
    );
  });
});

/** Runs the CLI to completion and returns its stdout. */
function cli(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli.ts'), ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`cli ${args.join(' ')} exited ${code}: ${err}`))));
  });
}

describe('CLI processes on one SQLite file', () => {
  const key = testKey();
  let tenHolds: bigint;
  let configFile: string;
  let gw: GatewayProcess | undefined;

  beforeAll(async () => {
    tenHolds = 10n * (await worstCaseHold(messages, 500));
    const walletUsd = `${tenHolds / 1_000_000_000n}.${(tenHolds % 1_000_000_000n).toString().padStart(9, '0')}`;
    configFile = writeConfig({
      upstreams: { test: { baseUrl: upstream.url, apiKey: 'upstream-key', timeoutMs: 20_000 } },
      models: [{ id: MODEL, upstream: 'test', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE } }],
      accounts: [{ id: 'acct_holds', walletUsd }],
      keys: [{ key, account: 'acct_holds' }],
      limits: { keyRequestsPerMinute: 1_000, ipRequestsPerMinute: 1_000_000 },
      storage: { driver: 'sqlite', path: join(dir, 'cli.db') },
    });
  });
  afterAll(async () => {
    await gw?.kill('SIGKILL');
  });

  const usage = async (g: GatewayProcess) =>
    ((await (await fetch(`${g.baseURL}/key`, { headers: auth(key) })).json()) as { data: { usage: number; wallet: { balance: number; held: number } } }).data;

  it('50 concurrent calls against exactly 10 holds: exactly 10 succeed', async () => {
    gw = await startGatewayProcess(configFile);
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    upstream.setBehavior({ kind: 'json', content: 'ok', usage: USAGE, gate });
    const refusals: Response[] = [];
    const calls = Array.from({ length: 50 }, () =>
      fetch(chatRequest(gw!.baseURL, key, 500)).then((r) => {
        if (r.status === 402) refusals.push(r);
        return r;
      }),
    );
    // Every refusal comes back while the 10 accepted calls wait at the upstream.
    await eventually(() => refusals.length === 40, '40 refusals', 20_000);
    open();
    const results = await Promise.all(calls);
    expect(results.filter((r) => r.status === 200)).toHaveLength(10);
    await eventually(async () => (await usage(gw!)).usage === Number(10n * CALL) / 1e9, 'ten settles', 10_000);
    expect((await usage(gw!)).wallet.held).toBe(0);
  });

  it('kill -9 then a restart loses no settled charge, and the ledger exports as CSV and JSONL', async () => {
    upstream.setBehavior({ kind: 'json', content: 'ok', usage: USAGE });
    await cli(['wallet', 'top-up', '--config', configFile, '--account', 'acct_holds', '--usd', '1']);
    for (let i = 0; i < 5; i++) expect((await fetch(chatRequest(gw!.baseURL, key))).status).toBe(200);
    // What the client can see settled: 15 charges.
    await eventually(async () => (await usage(gw!)).usage === Number(15n * CALL) / 1e9, 'fifteen settles', 10_000);
    const before = await usage(gw!);
    await gw!.kill('SIGKILL');

    gw = await startGatewayProcess(configFile);
    expect(await usage(gw)).toEqual(before);
    expect(before.wallet.balance).toBe(Number(tenHolds + 1_000_000_000n - 15n * CALL) / 1e9);

    const csv = (await cli(['ledger', '--config', configFile, '--account', 'acct_holds', '--format', 'csv'])).trim().split('\n');
    expect(csv[0]).toBe(
      'at,id,account,key,model,units,prompt_tokens,completion_tokens,cached_prompt_tokens,cache_write_tokens,reasoning_tokens,images,seconds,tokens,tier,cost_usd,held_usd,exceeded_hold,measured,upstream,reason',
    );
    // The opening balance, the top-up and the 15 charges: the ledger sums to minus the balance.
    expect(csv).toHaveLength(18);
    const costColumn = csv[0]!.split(',').indexOf('cost_usd');
    const total = csv.slice(1).reduce((sum, line) => sum + nano(Number(line.split(',')[costColumn])), 0n);
    expect(total).toBe(15n * CALL - tenHolds - 1_000_000_000n);
    const jsonl = (await cli(['ledger', '--config', configFile, '--account', 'acct_holds', '--since', '1h']))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { model: string; units: string; prompt_tokens: number; cost_usd: string })
      .filter((l) => l.units !== 'credit');
    expect(jsonl).toHaveLength(15);
    expect(jsonl[0]).toMatchObject({ model: MODEL, prompt_tokens: USAGE.prompt_tokens, cost_usd: String(Number(CALL) / 1e9) });
    expect(await cli(['ledger', '--config', configFile, '--account', 'acct_holds', '--since', '2999-01-01'])).toBe('');
  });
});
