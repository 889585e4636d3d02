/**
 * A/B of two builds' stores in one process: the store operations of a billed call (the IP's
 * window hit, the key's hit with the hold, the settle with its ledger entry) from 50
 * concurrent callers, the two builds alternating round by round, CPU per call read from this
 * process and, on Redis, from the Redis server (on PostgreSQL, from the backends serving this
 * process's connections: both builds' together, since the two pools share the process).
 *
 *   git checkout HEAD~1 -- src && npx tsup --out-dir distA && git checkout HEAD -- src && npx tsup
 *   STORE_AB=distA,dist STORE_AB_DRIVER=redis node --import tsx bench/store-ab.ts
 *
 * Both builds share one process, so neither can be luckier than the other for its whole life
 * (where the process landed on the shared cores, its memory layout), which `ab.ts`, one
 * process per build, cannot rule out. What it measures is the store layer alone, without the
 * HTTP path around it: use it for a change to a store.
 *
 * Environment (defaults in brackets): STORE_AB [distA,dist] the two build folders;
 * STORE_AB_DRIVER [redis] redis (REDIS_URL, a fresh prefix, deleted after) | postgres
 * (POSTGRES_URL, a fresh schema each, dropped after) | sqlite (a temp file each) | memory;
 * STORE_AB_ROUNDS [8]; STORE_AB_SECONDS [3] per build and round.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import type { Stores } from '../src/stores/types.js';
import { newRequestId } from '../src/http/request-id.js';
import { cpuMsOf } from './procs.js';
import { median } from './report.js';
import { dropSchema, freshSchema, POSTGRES_URL } from './postgres-util.js';
import { deleteKeysWithPrefix, REDIS_URL } from './redis-util.js';
import { postgresBackendPids, redisServerPid } from './storage-processes.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const env = process.env;
const BUILDS = (env.STORE_AB ?? 'distA,dist').split(',');
const DRIVER = env.STORE_AB_DRIVER ?? 'redis';
const ROUNDS = Number(env.STORE_AB_ROUNDS ?? 8);
const SECONDS = Number(env.STORE_AB_SECONDS ?? 3);
const CALLERS = 50;
const ACCOUNT = 'bench';
const MONTH = '2026-01';
if (BUILDS.length !== 2) throw new Error('STORE_AB: name two build folders, e.g. distA,dist');
if (!['redis', 'postgres', 'sqlite', 'memory'].includes(DRIVER)) throw new Error(`STORE_AB_DRIVER: unknown driver ${DRIVER}`);

const tmp = mkdtempSync(join(tmpdir(), 'model-gateway-store-ab-'));
const prefix = `mgstoreab:${randomBytes(4).toString('hex')}:`;
const schemas = BUILDS.map(() => freshSchema('mgstoreab'));

async function open(build: string, i: number): Promise<Stores> {
  const url = (file: string) => pathToFileURL(resolve(ROOT, build, file)).href;
  if (DRIVER === 'redis') return (await import(url('redis.js'))).createRedisStores({ url: REDIS_URL, keyPrefix: `${prefix}${i}:` });
  if (DRIVER === 'postgres') {
    return (await import(url('postgres.js'))).createPostgresStores({ url: POSTGRES_URL, schema: schemas[i] });
  }
  if (DRIVER === 'sqlite') return (await import(url('sqlite.js'))).createSqliteStores({ path: join(tmp, `${i}.db`) });
  return (await import(url('index.js'))).createMemoryStores();
}

/** One billed call's store operations, as the gateway issues them. */
async function call(stores: Stores): Promise<void> {
  // The gateway's own ids (time-ordered, from a cached entropy pool): randomBytes per call cost
  // this harness 2-3 µs, counted as if the store had spent it, and random ids land
  // anywhere in SQLite's and PostgreSQL's ledger indexes, where the gateway's land at the end.
  const holdId = newRequestId();
  const hold = { holdId, accountId: ACCOUNT, keyId: 'key', amount: 1_000n, monthlyCap: null, month: MONTH, ttlMs: 60_000 };
  const window = { bucket: 'key:key', limit: 100_000_000, windowMs: 60_000, accountId: ACCOUNT };
  await stores.limits.hit('ip:127.0.0.1', 100_000_000, 60_000);
  const folds = stores.billing.hitAndPlaceHold !== undefined && stores.billing.windowsId === stores.limits.windowsId;
  if (folds) {
    const r = await stores.billing.hitAndPlaceHold!(window, hold);
    if (r.hold?.ok !== true) throw new Error('the hold was refused');
  } else {
    await stores.limits.hit(window.bucket, window.limit, window.windowMs, ACCOUNT);
    if (!(await stores.billing.placeHold(hold)).ok) throw new Error('the hold was refused');
  }
  // The upstream's answer comes in a later turn.
  await new Promise((r) => setImmediate(r));
  const settled = await stores.billing.settle({
    holdId,
    accountId: ACCOUNT,
    month: MONTH,
    cost: 700n,
    entry: { id: holdId, accountId: ACCOUNT, keyId: 'key', model: 'bench/chat', units: { kind: 'tokens', prompt: 10, completion: 20 }, measured: 'usage', at: Date.now() },
  });
  if (!settled.settled) throw new Error('the settle did not land');
}

/** The storage service's processes whose CPU is read: the Redis server, or our PostgreSQL backends. */
const serverCpuMs = (pids: number[]) => pids.reduce((sum, pid) => sum + cpuMsOf(pid), 0);

async function run(stores: Stores, seconds: number, serverPids: number[]) {
  let calls = 0;
  const stop = Date.now() + seconds * 1000;
  const cpu0 = process.cpuUsage();
  const server0 = serverCpuMs(serverPids);
  await Promise.all(
    Array.from({ length: CALLERS }, async () => {
      while (Date.now() < stop) {
        await call(stores);
        calls++;
      }
    }),
  );
  const cpu = process.cpuUsage(cpu0);
  return {
    us: (cpu.user + cpu.system) / calls,
    serverUs: serverPids.length === 0 ? NaN : ((serverCpuMs(serverPids) - server0) * 1000) / calls,
    perS: calls / seconds,
  };
}

async function main(): Promise<void> {
  const redisPid = DRIVER === 'redis' ? await redisServerPid(REDIS_URL) : null;
  const server = DRIVER === 'redis' ? 'Redis' : DRIVER === 'postgres' ? 'PostgreSQL' : null;
  const stores: Stores[] = [];
  try {
    for (const [i, b] of BUILDS.entries()) {
      const s = await open(b, i);
      stores.push(s);
      await s.accounts.create({ id: ACCOUNT, grants: [], createdAt: 0 }, 10n ** 15n);
    }
    for (const s of stores) await run(s, 2, []); // warm-up (and every pool's connections opened)
    // Both builds' backends: a build's idle pool costs its backends next to nothing.
    const serverPids =
      redisPid !== null ? [redisPid] : DRIVER === 'postgres' ? await postgresBackendPids(POSTGRES_URL, process.pid) : [];
    const us: number[][] = [[], []];
    const serverUs: number[][] = [[], []];
    for (let round = 0; round < ROUNDS; round++) {
      for (const i of round % 2 ? [1, 0] : [0, 1]) {
        const r = await run(stores[i]!, SECONDS, serverPids);
        us[i]!.push(r.us);
        serverUs[i]!.push(r.serverUs);
        process.stdout.write(
          `round ${round + 1}/${ROUNDS}  ${BUILDS[i]}: ${r.us.toFixed(1)} µs/call${server === null ? '' : `, ${server} ${r.serverUs.toFixed(1)} µs/call`}, ${r.perS.toFixed(0)} calls/s\n`,
        );
      }
    }
    process.stdout.write(`\n${DRIVER}, ${ROUNDS} rounds, ${CALLERS} callers: this process's CPU per billed call's store operations, median (min - max)\n`);
    for (const [i, b] of BUILDS.entries()) {
      const xs = us[i]!;
      process.stdout.write(
        `  ${b}: ${median(xs).toFixed(1)} µs (${Math.min(...xs).toFixed(1)} - ${Math.max(...xs).toFixed(1)})` +
          (server === null ? '' : `; ${server}'s own CPU ${median(serverUs[i]!).toFixed(1)} µs`) +
          '\n',
      );
    }
  } finally {
    await Promise.allSettled(stores.map((s) => s.close()));
    rmSync(tmp, { recursive: true, force: true });
    if (DRIVER === 'postgres') await Promise.allSettled(schemas.map((s) => dropSchema(s, POSTGRES_URL)));
    if (DRIVER === 'redis') {
      const c = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(c, prefix).catch(() => {});
      c.disconnect();
    }
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`store-ab failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
