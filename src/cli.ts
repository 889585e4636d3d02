#!/usr/bin/env node
/**
 * model-gateway serve --config FILE [--port N] [--host H]
 * model-gateway accounts create --config FILE --id ID [--wallet USD]
 * model-gateway wallet top-up --config FILE --account ID --usd AMOUNT
 * model-gateway keys create --config FILE --account ID [--kind developer|agent] [--model M] [--label L] [--monthly-cap USD]
 * model-gateway keys disable --config FILE --id KEY_ID
 * model-gateway keys list --config FILE --account ID
 */
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { AdminError } from './admin.js';
import { loadConfigFile } from './config-file.js';
import { createGateway, type Gateway, type GatewayOptions } from './gateway.js';
import { consoleLogger, silentLogger } from './log.js';
import { ConfigError, parseOptions } from './options.js';
import type { Stores } from './stores/types.js';

const USAGE = `usage:
  model-gateway serve --config FILE [--port N] [--host H]
  model-gateway accounts create --config FILE --id ID [--wallet USD]
  model-gateway wallet top-up --config FILE --account ID --usd AMOUNT
  model-gateway keys create --config FILE --account ID [--kind developer|agent] [--model M] [--label L] [--monthly-cap USD]
  model-gateway keys disable --config FILE --id KEY_ID
  model-gateway keys list --config FILE --account ID`;

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
  help: { type: 'boolean', short: 'h' },
} as const;

class UsageError extends Error {}

function need(value: string | undefined, flag: string): string {
  if (!value) throw new UsageError(`missing --${flag}`);
  return value;
}

/** Stores for the configured storage driver (Redis through the optional subpath). */
async function storesFor(config: GatewayOptions): Promise<Stores | undefined> {
  const cfg = parseOptions(config);
  if (cfg.storage.driver !== 'redis') return undefined;
  const { createRedisStores } = await import('./redis.js');
  const { driver: _driver, ...connection } = cfg.storage;
  return createRedisStores(connection);
}

async function open(configFile: string, quiet: boolean): Promise<{ gateway: Gateway; stores?: Stores }> {
  const config = (await loadConfigFile(configFile)) as GatewayOptions;
  const stores = await storesFor(config);
  const gateway = createGateway({ ...config, stores, logger: quiet ? silentLogger : consoleLogger() });
  await gateway.ready;
  return { gateway, stores };
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
  const storage = gateway.config.storage.driver;
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
      process.stderr.write('note: storage is "memory"; this change lives only in this process. Use a redis storage config.\n');
    }
    const a = gateway.admin;
    let out: unknown;
    if (group === 'accounts' && action === 'create') {
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
  } else if (err instanceof ConfigError || err instanceof AdminError) {
    process.stderr.write(`${err.message}\n`);
  } else {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  }
  process.exit(1);
});
