#!/usr/bin/env node
/**
 * model-gateway serve --config FILE [--port N] [--host H]
 * model-gateway accounts create --config FILE --id ID [--wallet USD]
 * model-gateway wallet top-up --config FILE --account ID --usd AMOUNT
 * model-gateway keys create --config FILE --account ID [--kind developer|agent] [--model M] [--label L] [--monthly-cap USD]
 * model-gateway keys disable --config FILE --id KEY_ID
 * model-gateway keys list --config FILE --account ID
 * model-gateway ledger --config FILE --account ID [--key KEY_ID] [--since WHEN] [--until WHEN] [--format jsonl|csv]
 *
 * A config that names no storage uses SQLite at ./data/gateway.db.
 */
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { AdminError, toUnixMs } from './admin.js';
import { loadConfigFile } from './config-file.js';
import { createGateway, type Gateway, type GatewayOptions } from './gateway.js';
import { ledgerHeader, ledgerLine, type LedgerFormat } from './ledger-export.js';
import { consoleLogger, silentLogger } from './log.js';
import { ConfigError, parseOptions } from './options.js';
import { StoreUnavailableError } from './stores/errors.js';
import type { Stores } from './stores/types.js';

const USAGE = `usage:
  model-gateway serve --config FILE [--port N] [--host H]
  model-gateway accounts create --config FILE --id ID [--wallet USD]
  model-gateway wallet top-up --config FILE --account ID --usd AMOUNT
  model-gateway keys create --config FILE --account ID [--kind developer|agent] [--model M] [--label L] [--monthly-cap USD]
  model-gateway keys disable --config FILE --id KEY_ID
  model-gateway keys list --config FILE --account ID
  model-gateway ledger --config FILE --account ID [--key KEY_ID] [--since WHEN] [--until WHEN] [--format jsonl|csv]

WHEN is an ISO 8601 date or date-time (UTC unless it names an offset), unix ms, or an age
such as 30m, 24h or 7d. A config that names no storage uses SQLite at ./data/gateway.db.`;

const options = {
  config: { type: 'string' },
  port: { type: 'string' },
  host: { type: 'string' },
  id: { type: 'string' },
  wallet: { type: 'string' },
  account: { type: 'string' },
  usd: { type: 'string' },
  kind: { type: 'string' },
  model: { type: 'string' },
  label: { type: 'string' },
  'monthly-cap': { type: 'string' },
  key: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  format: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

class UsageError extends Error {}

function need(value: string | undefined, flag: string): string {
  if (!value) throw new UsageError(`missing --${flag}`);
  return value;
}

/** Where the CLI keeps its books when a config names no storage. */
const DEFAULT_STORAGE = { driver: 'sqlite', path: './data/gateway.db' } as const;

/**
 * Stores the CLI builds itself: the drivers that connect asynchronously (Redis, PostgreSQL)
 * and any limits taken from Redis. Memory and plain SQLite are left to createGateway. The
 * driver modules are loaded on demand, so their packages are needed only when configured.
 */
async function storesFor(config: GatewayOptions): Promise<Stores | undefined> {
  const { storage } = parseOptions(config);
  if (storage.driver === 'memory') return undefined;
  if (storage.driver === 'redis') {
    const { createRedisStores } = await import('./redis.js');
    return createRedisStores({ url: storage.url, keyPrefix: storage.keyPrefix });
  }
  if (storage.driver === 'sqlite' && !storage.limits) return undefined;
  let books: Stores;
  if (storage.driver === 'postgres') {
    const { createPostgresStores } = await import('./postgres.js');
    books = await createPostgresStores({ url: storage.url, schema: storage.schema });
  } else {
    const { createSqliteStores } = await import('./sqlite.js');
    books = createSqliteStores({ path: storage.path, synchronous: storage.synchronous });
  }
  if (!storage.limits) return books;
  const { createRedisStores } = await import('./redis.js');
  const redis = createRedisStores({ url: storage.limits.url, keyPrefix: storage.limits.keyPrefix });
  return {
    ...books,
    limits: redis.limits,
    async close() {
      await Promise.allSettled([books.close(), redis.close()]);
    },
  };
}

async function open(configFile: string, quiet: boolean): Promise<{ gateway: Gateway; stores?: Stores }> {
  const loaded = (await loadConfigFile(configFile)) as GatewayOptions;
  const config: GatewayOptions = loaded.storage === undefined ? { ...loaded, storage: DEFAULT_STORAGE } : loaded;
  const stores = await storesFor(config);
  try {
    const gateway = createGateway({ ...config, stores, logger: quiet ? silentLogger : consoleLogger() });
    await gateway.ready;
    return { gateway, stores };
  } catch (err) {
    await stores?.close();
    throw err;
  }
}

/** Where the books are, for the start-up line. */
function describeStorage(storage: Gateway['config']['storage']): string {
  if (storage.driver === 'sqlite') return `sqlite at ${storage.path}${storage.limits ? ', limits on redis' : ''}`;
  if (storage.driver === 'postgres') return `postgres schema ${storage.schema}${storage.limits ? ', limits on redis' : ''}`;
  return storage.driver;
}

/** A WHEN of the ledger command: an age (30m, 24h, 7d) before now, unix ms, or an ISO 8601 time. */
function parseWhen(value: string, flag: string): number {
  const age = /^(\d+)([mhd])$/.exec(value);
  if (age) return Date.now() - Number(age[1]) * { m: 60_000, h: 3_600_000, d: 86_400_000 }[age[2] as 'm' | 'h' | 'd'];
  if (/^\d+$/.test(value)) return Number(value);
  try {
    return toUnixMs(value, `--${flag}`);
  } catch {
    throw new UsageError(`--${flag}: not a time: ${value} (an ISO 8601 date or date-time, unix ms, or an age such as 24h or 7d)`);
  }
}

/** Writes an account's ledger, page by page, so an export of any size runs in constant memory. */
async function exportLedger(gateway: Gateway, values: Record<string, string | boolean | undefined>): Promise<void> {
  const format = (values.format ?? 'jsonl') as string;
  if (format !== 'jsonl' && format !== 'csv') throw new UsageError('--format is jsonl or csv');
  const query = {
    account: need(values.account as string | undefined, 'account'),
    ...(typeof values.key === 'string' ? { key: values.key } : {}),
    ...(typeof values.since === 'string' ? { from: parseWhen(values.since, 'since') } : {}),
    ...(typeof values.until === 'string' ? { to: parseWhen(values.until, 'until') } : {}),
    limit: 1_000,
  };
  const write = (text: string) =>
    new Promise<void>((resolve, reject) => (process.stdout.write(text) ? resolve() : process.stdout.once('drain', resolve).once('error', reject)));
  const header = ledgerHeader(format as LedgerFormat);
  if (header) await write(header);
  let cursor: string | undefined;
  for (;;) {
    const page = await gateway.admin.ledger({ ...query, ...(cursor === undefined ? {} : { cursor }) });
    if (page.entries.length) await write(page.entries.map((e) => ledgerLine(e, format as LedgerFormat)).join(''));
    if (!page.more) return;
    cursor = page.nextCursor;
  }
}

async function serve(configFile: string, port: number, host: string): Promise<void> {
  const { gateway, stores } = await open(configFile, false);
  const server = createServer(gateway);
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const addr = server.address();
  const where = typeof addr === 'object' && addr ? `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}` : String(addr);
  const storage = describeStorage(gateway.config.storage);
  process.stdout.write(
    `model-gateway listening on ${where}/v1 (storage: ${storage}; upstream: ${gateway.usesSimulator ? 'built-in simulator' : 'configured upstreams'})\n`,
  );
  const stop = () => {
    server.close();
    server.closeAllConnections();
    void Promise.resolve(gateway.dispose())
      .then(() => stores?.close())
      .finally(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

async function admin(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, options, allowPositionals: true });
  const [group, action] = positionals;
  const configFile = need(values.config, 'config');
  if (group === 'serve') {
    const port = Number(values.port ?? 8080);
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`bad --port ${values.port}`);
    return serve(configFile, port, values.host ?? '127.0.0.1');
  }
  const { gateway, stores } = await open(configFile, true);
  try {
    if (gateway.config.storage.driver === 'memory') {
      process.stderr.write('note: storage is "memory"; this change lives only in this process. Use sqlite, postgres or redis storage.\n');
    }
    const a = gateway.admin;
    let out: unknown;
    if (group === 'ledger' && action === undefined) {
      await exportLedger(gateway, values);
      return;
    } else if (group === 'accounts' && action === 'create') {
      out = await a.createAccount({ id: need(values.id, 'id'), walletUsd: values.wallet ?? 0 });
    } else if (group === 'wallet' && action === 'top-up') {
      out = await a.topUp(need(values.account, 'account'), need(values.usd, 'usd'));
    } else if (group === 'keys' && action === 'create') {
      const kind = values.kind ?? 'developer';
      if (kind !== 'developer' && kind !== 'agent') throw new UsageError('--kind is developer or agent');
      out = await a.createKey({
        account: need(values.account, 'account'),
        kind,
        model: values.model ?? null,
        label: values.label ?? null,
        monthlyCapUsd: values['monthly-cap'] ?? null,
      });
    } else if (group === 'keys' && action === 'disable') {
      await a.disableKey(need(values.id, 'id'));
      out = { disabled: values.id };
    } else if (group === 'keys' && action === 'list') {
      out = await a.listKeys(need(values.account, 'account'));
    } else {
      throw new UsageError(`unknown command: ${positionals.join(' ')}`);
    }
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  } finally {
    await gateway.dispose();
    await stores?.close();
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.length === 0 || argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  await admin(argv);
}

main().catch((err: unknown) => {
  if (err instanceof UsageError || (err as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
  } else if (err instanceof ConfigError || err instanceof AdminError || err instanceof StoreUnavailableError) {
    process.stderr.write(`${err.message}\n`);
  } else {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  }
  process.exit(1);
});
