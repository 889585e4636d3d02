#!/usr/bin/env node
/**
 * The `model-gateway` command: `serve`, and the admin commands (accounts, wallet, keys) on
 * the storage a config names. USAGE below is the reference. A mistake in the command line
 * (a bad number, a port in use, a missing flag) is one clear line and exit code 1, never a
 * stack trace; a stack is printed only for a bug.
 */
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { createHash } from 'node:crypto';
import { AdminError, whenToUnixMs } from './admin/accounts.js';
import { ADMIN_COMMANDS, checkFlags, READ_ONLY, runAdminCommand } from './cli/commands.js';
import { need, UsageError } from './cli/values.js';
import { describeStorage, open, StoreUnreachableError } from './cli/open.js';
import { flagProblem } from './cli/flags.js';
import { accountBatches } from './admin/batches.js';
import { auditText } from './cli/audit.js';
import type { Gateway } from './gateway.js';
import { ConfigError } from './options.js';
import { GatewayError } from './errors.js';
import { ledgerHeader, ledgerLine, type LedgerFormat } from './admin/ledger-export.js';
import { isStoreUnavailable } from './stores/errors.js';
import { announce, checkShareable, isWorker, STOP_SIGNALS, superviseWorkers, workerCount, WorkersError } from './cli/workers.js';

const USAGE = `usage:
  model-gateway serve --config FILE [--port N] [--host H] [--workers N|auto]
  model-gateway accounts create --config FILE --id ID [--wallet USD] [--budget USD/PERIOD ...]
  model-gateway accounts budgets --config FILE --id ID --budget USD/PERIOD ... | --budget none
  model-gateway accounts list --config FILE
  model-gateway wallet show --config FILE --account ID
  model-gateway wallet top-up --config FILE --account ID --usd AMOUNT
  model-gateway wallet adjust --config FILE --account ID --usd SIGNED_AMOUNT --reason TEXT [--id ADJUSTMENT_ID]
  model-gateway keys create --config FILE --account ID [--kind developer|agent] [--model M] [--label L] [--monthly-cap USD]
                    [--models LIST] [--tpm N] [--budget USD/PERIOD ...]
  model-gateway keys limits --config FILE --id KEY_ID [--monthly-cap USD|none] [--models LIST|all] [--tpm N|default]
                    [--budget USD/PERIOD ...|none]
  model-gateway keys list --config FILE --account ID
  model-gateway keys disable --config FILE --id KEY_ID
  model-gateway keys enable --config FILE --id KEY_ID
  model-gateway keys rotate --config FILE --id KEY_ID    (a new secret, same id, spend and limits; printed once)
  model-gateway keys delete --config FILE --id KEY_ID    (its ledger entries stay)
  model-gateway ledger --config FILE --account ID [--key KEY_ID] [--since WHEN] [--until WHEN] [--format jsonl|csv]
  model-gateway audit --config FILE [--account ID]    (exit 0: the books add up; 1: differences)
  model-gateway batches list --config FILE --account ID    (the account's latest 100 batches)

options:
  --config FILE       the JSON config; its storage is what the admin commands change
  --port N            serve: the TCP port, 0-65535 (default 8080; 0 picks a free one)
  --host H            serve: the address to listen on (default 127.0.0.1; 0.0.0.0 for all)
  --workers N|auto    serve: gateway processes on the one port (default 1; auto: one per core);
                      more than 1 needs sqlite, postgres or redis storage
  --wallet USD        accounts create: the starting balance, e.g. 25 or 12.5 (default 0)
  --usd AMOUNT        wallet top-up: the amount to add, more than 0; wallet adjust: signed, not 0
                      (-2.5 takes money out, and may leave the wallet below zero)
  --reason TEXT       wallet adjust: why, kept in the ledger entry
  --id ADJUSTMENT_ID  wallet adjust: makes it idempotent (an id already applied changes nothing)
  --monthly-cap USD   keys create, keys limits: the key's monthly spending cap (none: no cap)
  --kind K            keys create: developer (default) or agent (needs --model)
  --models LIST       keys: the models the key may call, comma-separated ids or prefixes ending in *
  --tpm N             keys: tokens per minute for the key (over limits.keyTokensPerMinute)
  --budget USD/PERIOD keys, accounts: a budget per day, week or month (e.g. 5/day); repeat for several
  -h, --help          this text

Amounts are USD with at most 9 decimal places. WHEN is an ISO 8601 date or date-time (UTC
unless it names an offset), unix ms, or an age such as 30m, 24h or 7d. A config that names no
storage keeps its books in SQLite at ./data/gateway.db.`;

const options = {
  config: { type: 'string' },
  port: { type: 'string' },
  host: { type: 'string' },
  workers: { type: 'string' },
  id: { type: 'string' },
  wallet: { type: 'string' },
  account: { type: 'string' },
  usd: { type: 'string' },
  reason: { type: 'string' },
  kind: { type: 'string' },
  model: { type: 'string' },
  label: { type: 'string' },
  'monthly-cap': { type: 'string' },
  models: { type: 'string' },
  tpm: { type: 'string' },
  budget: { type: 'string', multiple: true },
  key: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  format: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function port(value: string | undefined): number {
  if (value === undefined) return 8080;
  const n = /^\d{1,5}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 0 && n <= 65535)) throw new UsageError(`--port must be a whole number from 0 to 65535; got "${value}"`);
  return n;
}

/**
 * parseArgs reads "--usd -5" as a flag without its value; a negative number there is meant
 * as the value (and is then refused with the amount's own message).
 */
function joinNegativeValues(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    const flag = arg.startsWith('--') ? arg.slice(2) : '';
    if (flag in options && options[flag as keyof typeof options].type === 'string' && next !== undefined && /^-\d/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/** What a failed listen means, in words; null for a failure that is a bug. */
function listenProblem(err: NodeJS.ErrnoException, host: string, port: number): string | null {
  if (err.code === 'EADDRINUSE') return `port ${port} on ${host} is already in use: stop what listens there, or choose another --port`;
  if (err.code === 'EACCES') return `no permission to listen on port ${port} on ${host} (ports below 1024 need privileges): choose another --port`;
  if (err.code === 'EADDRNOTAVAIL') return `cannot listen on ${host}: no network interface has that address (see --host)`;
  if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') return `cannot listen on ${host}: the host name does not resolve (see --host)`;
  return null;
}

/** A WHEN of the ledger command: an age (30m, 24h, 7d) before now, unix ms, or an ISO 8601 time. */
function parseWhen(value: string, flag: string): number {
  try {
    return whenToUnixMs(value, `--${flag}`, Date.now());
  } catch (err) {
    if (err instanceof AdminError) throw new UsageError(err.message);
    throw err;
  }
}

/** Writes an account's ledger, page by page, so an export of any size runs in constant memory. */
async function exportLedger(gateway: Gateway, values: Record<string, string | string[] | boolean | undefined>): Promise<void> {
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

/**
 * The admin token of examples/gateway.config.json, which holds only its SHA-256 (as every
 * config must). It is public like the demo keys, so it is for trying the console out only.
 */
const DEMO_ADMIN_TOKEN = 'mg-admin-DEMOdemoDEMOdemoDEMOdemoDEMOdemo0001';

/**
 * What serve says once it listens: where /v1 is, then the console and metrics URLs when the
 * config serves them, so a quick start shows where to look. The admin token is printed only
 * when it is the demo one: any other token is the operator's secret, and the gateway knows
 * only its digest anyway.
 */
function startLines(gateway: Gateway, where: string): string {
  const { storage, admin, metrics } = gateway.config;
  const upstream = gateway.usesSimulator ? 'built-in simulator' : 'configured upstreams';
  const extras = [admin ? `console at ${where}/admin` : '', metrics ? `metrics at ${where}${metrics.path}` : ''].filter(Boolean);
  let text = `model-gateway listening on ${where}/v1 (storage: ${describeStorage(storage)}; upstream: ${upstream})`;
  text += extras.length ? `; ${extras.join(', ')}\n` : '\n';
  const demoDigest = createHash('sha256').update(DEMO_ADMIN_TOKEN).digest('hex');
  if (admin?.tokenSha256.toLowerCase() === demoDigest) {
    text += `demo admin token (for trying out only; set your own admin.tokenSha256 before others can reach this): ${DEMO_ADMIN_TOKEN}\n`;
  }
  return text;
}

async function serve(configFile: string, port: number, host: string): Promise<void> {
  // A store that does not answer yet is named on stderr; the gateway serves 503 until it does.
  const { gateway, stores } = await open(configFile, false, (message) => process.stderr.write(`${message}\n`));
  const server = createServer(gateway);
  server.keepAliveTimeout = 65_000;
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, resolve);
    });
  } catch (err) {
    await gateway.dispose();
    await stores?.close();
    const problem = listenProblem(err as NodeJS.ErrnoException, host, port);
    throw problem ? new UsageError(problem) : err;
  }
  const addr = server.address();
  const where = typeof addr === 'object' && addr ? `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}` : String(addr);
  announce(startLines(gateway, where));
  // Graceful shutdown: stop accepting connections, let calls and streams in flight finish
  // within the grace period (the gateway cuts and bills what is left after it), settle
  // everything, then exit 0. Idle keep-alive connections are closed as they become idle.
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    // A worker's primary says it once for all.
    if (!isWorker()) process.stdout.write(`model-gateway shutting down: finishing calls in flight (up to ${gateway.config.shutdownGraceMs} ms)\n`);
    server.close();
    server.closeIdleConnections();
    const idle = setInterval(() => server.closeIdleConnections(), 100);
    void Promise.resolve(gateway.dispose())
      .catch((err: unknown) => process.stderr.write(`shutdown: ${err instanceof Error ? err.message : String(err)}\n`))
      .then(() => {
        clearInterval(idle);
        server.closeAllConnections();
        return stores?.close();
      })
      .finally(() => process.exit(0));
  };
  // Every stop signal drains, a hangup too (the terminal or SSH session closed, a
  // supervisor's reload). Each stays handled for the life of the process: a repeated signal
  // would otherwise take its default action and end the process at once, cutting the streams
  // in flight unbilled. systemd's default stop signals every process of the unit, so under
  // `--workers` each worker is told twice (by systemd and by its primary). The drain is
  // bounded by the grace period either way.
  for (const signal of STOP_SIGNALS) process.on(signal, stop);
}

async function admin(argv: string[]): Promise<void> {
  const problem = flagProblem(argv, options);
  if (problem) throw new UsageError(problem);
  const { values, positionals } = parseArgs({ args: joinNegativeValues(argv), options, allowPositionals: true });
  const [group, action] = positionals;
  if (group === 'serve') {
    const configFile = need(values.config, 'config');
    const listen = port(values.port);
    const workers = workerCount(values.workers);
    if (workers === 1 || isWorker()) return serve(configFile, listen, values.host ?? '127.0.0.1');
    await checkShareable(configFile, workers);
    process.exitCode = await superviseWorkers(workers);
    return;
  }
  const command = `${group} ${action}`;
  const alone = ((group === 'ledger' || group === 'audit') && action === undefined) || command === 'batches list';
  if (!(ADMIN_COMMANDS as readonly string[]).includes(command) && !alone) throw new UsageError(`unknown command: ${positionals.join(' ') || '(none)'}`, true);
  const configFile = need(values.config, 'config');
  // Flags are checked before anything connects to the storage.
  const flags = checkFlags(command, values);
  const { gateway, stores } = await open(configFile, true, undefined, (path) => {
    const where = `A relative storage path is taken from the folder the command runs in (${process.cwd()}): run it where the server runs, or give the config an absolute path.`;
    // A report (audit, ledger, batches) on an empty database made for it would say the books are fine.
    if (alone) throw new UsageError(`no SQLite database at ${path}. ${where}`);
    process.stderr.write(`note: no SQLite database at ${path} yet: creating it (with the config's seeded accounts and keys). ${where}\n`);
  });
  try {
    if (!alone && !READ_ONLY.has(command) && gateway.config.storage.driver === 'memory') {
      process.stderr.write('note: storage is "memory"; this change lives only in this process. Use sqlite, postgres or redis storage.\n');
    }
    if (group === 'ledger') return await exportLedger(gateway, values);
    if (command === 'batches list') {
      process.stdout.write(`${JSON.stringify(await accountBatches(stores, need(values.account, 'account')), null, 2)}\n`);
      return;
    }
    if (group === 'audit') {
      const report = await gateway.admin.audit(values.account === undefined ? {} : { account: values.account });
      process.stdout.write(auditText(report));
      if (!report.ok) process.exitCode = 1;
      return;
    }
    const out = await runAdminCommand(gateway.admin, command, values, flags);
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  } finally {
    await gateway.dispose();
    await stores?.close();
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  // No command is a mistake (a script that lost its arguments), told as every other one is.
  if (argv.length === 0) throw new UsageError('no command given', true);
  await admin(argv);
}

main().catch((err: unknown) => {
  const code = (err as { code?: unknown } | null)?.code;
  if ((err instanceof UsageError && !err.showUsage) || err instanceof WorkersError) {
    process.stderr.write(`${err.message}\n(model-gateway --help lists every command and option)\n`);
  } else if (err instanceof UsageError || (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_'))) {
    process.stderr.write(`${(err as Error).message}\n\n${USAGE}\n`);
  } else if (err instanceof ConfigError || err instanceof AdminError || err instanceof StoreUnreachableError) {
    process.stderr.write(`${err.message}\n`);
  } else if (err instanceof GatewayError && err.status < 500) {
    // A refusal (a seeded key deleted, a conflict): the operator's to fix, not a bug.
    process.stderr.write(`${err.message}\n`);
  } else if (isStoreUnavailable(err)) {
    process.stderr.write(`the storage does not answer: ${err.message}\n`);
  } else {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  }
  process.exit(1);
});
