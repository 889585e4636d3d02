/**
 * The CLI covers what the console does, on durable (SQLite) storage: a key rotated keeps its
 * id, limits and spend while its old secret stops working; a key deleted is gone; a wallet
 * adjustment is signed, exact and one ledger entry with its reason (idempotent by id); a key's
 * monthly cap changes after creation; `accounts list` shows budgets. A bad flag is one line
 * naming it, before any storage is opened.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { afterAll, describe, expect, it } from 'vitest';
import { createGateway } from '../../src/gateway.js';
import { silentLogger } from '../../src/observability/log.js';
import { writeConfig } from '../helpers/processes.js';

const ROOT = join(import.meta.dirname, '..', '..');
const BUNDLE = join(ROOT, '.tmp', `cli-admin-${process.pid}-${randomBytes(3).toString('hex')}.mjs`);
await build({ entryPoints: [join(ROOT, 'src', 'cli.ts')], bundle: true, platform: 'node', format: 'esm', packages: 'external', outfile: BUNDLE, logLevel: 'warning' });
const dir = mkdtempSync(join(tmpdir(), 'mg-cli-admin-'));
afterAll(async () => {
  await rm(BUNDLE, { force: true });
  rmSync(dir, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cli(...args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BUNDLE, ...args], { cwd: ROOT, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

function json<T>(r: Run): T {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
}

const CONFIG = {
  upstreams: { sim: { simulate: true as const } },
  models: [{ id: 'sim/chat', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } }],
  storage: { driver: 'sqlite' as const, path: join(dir, 'gateway.db') },
};
const config = writeConfig(CONFIG);

/** A gateway in this process on the same SQLite file (its key cache starts empty). */
async function gatewayOnTheBooks() {
  const gateway = createGateway({ ...CONFIG, logger: silentLogger });
  await gateway.ready;
  return gateway;
}

const keyInfo = async (gateway: Awaited<ReturnType<typeof gatewayOnTheBooks>>, key: string) => {
  const res = await gateway.fetch(new Request('http://gw/v1/key', { headers: { authorization: `Bearer ${key}` } }));
  return { status: res.status, usage: res.status === 200 ? ((await res.json()) as { data: { usage: number } }).data.usage : null };
};

describe('CLI: rotate and delete keys, adjust wallets, change caps', () => {
  it('keys rotate: a new secret for the same id, limits and spend kept, the old secret refused', async () => {
    json(await cli('accounts', 'create', '--config', config, '--id', 'rot', '--wallet', '5'));
    const made = json<{ id: string; key: string }>(
      await cli('keys', 'create', '--config', config, '--account', 'rot', '--monthly-cap', '3', '--budget', '1/day', '--label', 'ci'),
    );
    const before = await gatewayOnTheBooks();
    try {
      const chat = await before.fetch(
        new Request('http://gw/v1/chat/completions', {
          method: 'POST',
          headers: { authorization: `Bearer ${made.key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim/chat', messages: [{ role: 'user', content: 'hello' }], max_tokens: 20 }),
        }),
      );
      expect(chat.status).toBe(200);
      await chat.text();
    } finally {
      await before.dispose();
    }

    const rotated = json<{ id: string; key: string; prefix: string }>(await cli('keys', 'rotate', '--config', config, '--id', made.id));
    expect(rotated.id).toBe(made.id);
    expect(rotated.key).toMatch(/^sk-mg-[A-Za-z0-9]{40,}$/);
    expect(rotated.key).not.toBe(made.key);
    expect(rotated.key.startsWith(rotated.prefix)).toBe(true);
    const [listed] = json<Record<string, unknown>[]>(await cli('keys', 'list', '--config', config, '--account', 'rot'));
    expect(listed).toMatchObject({ id: made.id, label: 'ci', monthlyCapUsd: '3', budgets: [{ usd: '1', period: 'day' }], prefix: rotated.prefix });

    const after = await gatewayOnTheBooks();
    try {
      expect((await keyInfo(after, made.key)).status).toBe(401);
      const renewed = await keyInfo(after, rotated.key);
      expect(renewed.status).toBe(200);
      // The spend made with the old secret is still the key's.
      expect(renewed.usage).toBeGreaterThan(0);
    } finally {
      await after.dispose();
    }
  });

  it('keys delete: the key is gone (a second delete names it), and its secret is refused', async () => {
    json(await cli('accounts', 'create', '--config', config, '--id', 'del'));
    const made = json<{ id: string; key: string }>(await cli('keys', 'create', '--config', config, '--account', 'del'));
    expect(json(await cli('keys', 'delete', '--config', config, '--id', made.id))).toEqual({ deleted: made.id });
    expect(json(await cli('keys', 'list', '--config', config, '--account', 'del'))).toEqual([]);
    const again = await cli('keys', 'delete', '--config', config, '--id', made.id);
    expect(again.code).toBe(1);
    expect(again.stderr).toBe(`No key "${made.id}".\n`);
    const gateway = await gatewayOnTheBooks();
    try {
      expect((await keyInfo(gateway, made.key)).status).toBe(401);
    } finally {
      await gateway.dispose();
    }
  });

  it("an operator's refusal is one line and exit 1, never a stack trace: a seeded key deleted, an account created twice", async () => {
    const seededKey = `sk-mg-${'S'.repeat(44)}`;
    const seededConfig = writeConfig({
      ...CONFIG,
      storage: { driver: 'sqlite' as const, path: join(dir, 'seeded.db') },
      accounts: [{ id: 'seeded', walletUsd: 5 }],
      keys: [{ key: seededKey, account: 'seeded' }],
    });
    const [seeded] = json<Array<{ id: string }>>(await cli('keys', 'list', '--config', seededConfig, '--account', 'seeded'));
    const refused = await cli('keys', 'delete', '--config', seededConfig, '--id', seeded!.id);
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).not.toContain('    at ');
    // The same account again: refused as the admin API refuses it (409), the wallet unchanged.
    const twice = await cli('accounts', 'create', '--config', seededConfig, '--id', 'seeded', '--wallet', '100');
    expect(twice.code).toBe(1);
    expect(twice.stderr).toBe('Account "seeded" exists; its wallet is unchanged (wallet top-up adds to it).\n');
    expect(json(await cli('wallet', 'show', '--config', seededConfig, '--account', 'seeded'))).toMatchObject({ balanceUsd: '5' });
  });

  it('wallet adjust: signed and exact, one ledger entry with its reason, once per id', async () => {
    json(await cli('accounts', 'create', '--config', config, '--id', 'adj', '--wallet', '1'));
    const down = json<{ applied: boolean; balanceUsd: string }>(
      await cli('wallet', 'adjust', '--config', config, '--account', 'adj', '--usd', '-2.000000001', '--reason', 'refund of invoice 7', '--id', 'adj-7'),
    );
    expect(down).toEqual({ id: 'adj-7', applied: true, balanceUsd: '-1.000000001' });
    // The same id again changes nothing.
    const replay = json<{ applied: boolean; balanceUsd: string }>(
      await cli('wallet', 'adjust', '--config', config, '--account', 'adj', '--usd', '-2.000000001', '--reason', 'again', '--id', 'adj-7'),
    );
    expect(replay).toEqual({ id: 'adj-7', applied: false, balanceUsd: '-1.000000001' });
    json(await cli('wallet', 'adjust', '--config', config, '--account', 'adj', '--usd', '0.5', '--reason', 'goodwill'));
    expect(json(await cli('wallet', 'show', '--config', config, '--account', 'adj'))).toEqual({ account: 'adj', balanceUsd: '-0.500000001', heldUsd: '0' });

    const ledger = (await cli('ledger', '--config', config, '--account', 'adj')).stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(ledger.map((e) => [e.units, e.reason, e.cost_usd])).toEqual([
      ['credit', 'opening balance', '-1'],
      ['adjustment', 'refund of invoice 7', '2.000000001'],
      ['adjustment', 'goodwill', '-0.5'],
    ]);
    const audit = await cli('audit', '--config', config, '--account', 'adj');
    expect(audit.code, audit.stdout).toBe(0);
  });

  it('wallet adjust refuses a zero, inexact or missing amount and a missing reason, naming the flag', async () => {
    for (const [usd, got] of [['0', '"0"'], ['1.0000000001', '"1.0000000001"'], ['abc', '"abc"'], ['-0.000', '"-0.000"']] as const) {
      const bad = await cli('wallet', 'adjust', '--config', config, '--account', 'adj', '--usd', usd, '--reason', 'x');
      expect(bad.code).toBe(1);
      expect(bad.stderr).toContain(`--usd must be a signed USD amount other than 0, with at most 9 decimal places (e.g. -2.5 or 10); got ${got}`);
    }
    const noReason = await cli('wallet', 'adjust', '--config', config, '--account', 'adj', '--usd', '-1');
    expect(noReason.code).toBe(1);
    expect(noReason.stderr).toMatch(/^missing --reason/);
    // A top-up stays positive only.
    const negativeTopUp = await cli('wallet', 'top-up', '--config', config, '--account', 'adj', '--usd', '-1');
    expect(negativeTopUp.stderr).toMatch(/^--usd must be more than 0 USD/);
    expect(json(await cli('wallet', 'show', '--config', config, '--account', 'adj'))).toMatchObject({ balanceUsd: '-0.500000001' });
  });

  it('keys limits --monthly-cap sets and clears a cap after creation; accounts list shows budgets', async () => {
    json(await cli('accounts', 'create', '--config', config, '--id', 'cap', '--budget', '20/week'));
    const made = json<{ id: string }>(await cli('keys', 'create', '--config', config, '--account', 'cap'));
    expect(json(await cli('keys', 'limits', '--config', config, '--id', made.id, '--monthly-cap', '7.25'))).toMatchObject({ monthlyCapUsd: '7.25' });
    expect(json(await cli('keys', 'limits', '--config', config, '--id', made.id, '--monthly-cap', 'none', '--tpm', '900'))).toMatchObject({
      monthlyCapUsd: null,
      tokensPerMinute: 900,
    });
    const missing = await cli('keys', 'limits', '--config', config, '--id', 'key_nope', '--monthly-cap', '1');
    expect(missing.stderr).toBe('No key "key_nope".\n');
    const accounts = json<{ id: string; budgets: unknown }[]>(await cli('accounts', 'list', '--config', config));
    expect(accounts.find((a) => a.id === 'cap')?.budgets).toEqual([{ usd: '20', period: 'week' }]);
    expect(accounts.find((a) => a.id === 'del')?.budgets).toEqual([]);
  });

  it('--help lists the new commands', async () => {
    const help = (await cli('--help')).stdout;
    for (const s of ['keys rotate', 'keys delete', 'wallet adjust', '--reason TEXT', 'keys limits --config FILE --id KEY_ID [--monthly-cap USD|none]', 'accounts budgets']) {
      expect(help).toContain(s);
    }
  });
});
