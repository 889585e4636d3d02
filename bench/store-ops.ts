/**
 * What one store operation costs on each driver: a hold, a settle (with its ledger entry) and
 * a rate-window hit, one after another, as the gateway does them per billed call.
 *
 *   node --import tsx bench/store-ops.ts
 *
 * Reports wall time per operation and this process's CPU per operation (for PostgreSQL and
 * Redis the server's own CPU is not in it). Memory and SQLite run in process; SQLite on a temp
 * file with synchronous=NORMAL (WAL); PostgreSQL in a fresh schema (dropped after) at
 * POSTGRES_URL; Redis at REDIS_URL under a fresh prefix (deleted after). A driver whose server
 * does not answer is skipped.
 *
 * Environment knobs: STORE_OPS [2000] operations of each kind per driver,
 * STORE_DRIVERS [memory,sqlite,postgres,redis].
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createPostgresStores } from '../src/stores/postgres/entry.js';
import { createRedisStores } from '../src/stores/redis/entry.js';
import { createSqliteStores } from '../src/stores/sqlite/entry.js';
import { createMemoryStores } from '../src/stores/memory/index.js';
import type { Stores } from '../src/stores/types.js';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from './postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from './redis-util.js';

const N = Number(process.env.STORE_OPS ?? 2_000);
const DRIVERS = (process.env.STORE_DRIVERS ?? 'memory,sqlite,postgres,redis').split(',');

interface Opened {
  stores: Stores;
  done(): Promise<void>;
}

async function open(driver: string): Promise<Opened | string> {
  if (driver === 'memory') {
    const stores = createMemoryStores();
    return { stores, done: () => stores.close() };
  }
  if (driver === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'mg-store-ops-'));
    const stores = createSqliteStores({ path: join(dir, 'bench.db') });
    return {
      stores,
      done: async () => {
        await stores.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  if (driver === 'postgres') {
    const problem = await postgresProblem();
    if (problem) return `PostgreSQL unreachable (${problem})`;
    const schema = freshSchema('mgbench');
    const stores = await createPostgresStores({ url: POSTGRES_URL, schema });
    return {
      stores,
      done: async () => {
        await stores.close();
        await dropSchema(schema);
      },
    };
  }
  if (driver === 'redis') {
    const problem = await redisProblem();
    if (problem) return `Redis unreachable (${problem})`;
    const keyPrefix = `mgbench${Date.now()}:`;
    const stores = createRedisStores({ url: REDIS_URL, keyPrefix });
    return {
      stores,
      async done() {
        await stores.close();
        const c = new Redis(REDIS_URL);
        await deleteKeysWithPrefix(c, keyPrefix);
        c.disconnect();
      },
    };
  }
  return `unknown driver ${driver}`;
}

async function time(fn: (i: number) => Promise<unknown>, n = N): Promise<{ wallUs: number; cpuUs: number }> {
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await fn(i);
  const wall = Number(process.hrtime.bigint() - t0) / 1e3;
  const cpu = process.cpuUsage(cpu0);
  return { wallUs: wall / n, cpuUs: (cpu.user + cpu.system) / n };
}

const rows: string[] = [];
for (const driver of DRIVERS) {
  const opened = await open(driver);
  if (typeof opened === 'string') {
    rows.push(`| ${driver} | skipped: ${opened} | | | |`);
    continue;
  }
  const { stores } = opened;
  try {
    await stores.accounts.create({ id: 'bench', grants: [], createdAt: 0 }, 10n ** 15n);
    const hold = (i: number) => ({ holdId: `h${i}`, accountId: 'bench', keyId: 'k', amount: 1_000n, monthlyCap: 10n ** 14n, month: '2026-11', ttlMs: 60_000 });
    // As the gateway does per billed call: a hold, then its settle, so few holds are open.
    const settleReq = (i: number) => ({
      holdId: `h${i}`,
      accountId: 'bench',
      month: '2026-11',
      cost: 700n,
      entry: { id: `r${i}`, accountId: 'bench', keyId: 'k', model: 'm', units: { kind: 'tokens' as const, prompt: 10, completion: 20 }, measured: 'usage' as const, at: Date.now() },
    });
    // Warm up: prepared statements, script loading, JIT.
    for (let i = 0; i < 200; i++) {
      await stores.billing.placeHold(hold(-1 - i));
      await stores.billing.settle(settleReq(-1 - i));
    }
    const placed = { wallUs: 0, cpuUs: 0 };
    const settled = { wallUs: 0, cpuUs: 0 };
    for (let i = 0; i < N; i++) {
      const p = await time(() => stores.billing.placeHold(hold(i)), 1);
      const s = await time(() => stores.billing.settle(settleReq(i)), 1);
      placed.wallUs += p.wallUs / N;
      placed.cpuUs += p.cpuUs / N;
      settled.wallUs += s.wallUs / N;
      settled.cpuUs += s.cpuUs / N;
    }
    // A window far from its limit: every hit is counted, and the window holds thousands.
    const hits = await time(() => stores.limits.hit('key:k', 1_000_000, 60_000));
    const f = (x: { wallUs: number; cpuUs: number }) => `${x.wallUs.toFixed(1)} / ${x.cpuUs.toFixed(1)}`;
    rows.push(`| ${driver} | ${f(placed)} | ${f(settled)} | ${f(hits)} |`);
  } finally {
    await opened.done();
  }
}

console.log(`Store operations, ${N} of each, one at a time (µs per operation: wall / this process's CPU)\n`);
console.log('| Driver | placeHold | settle + ledger entry | rate-window hit |');
console.log('|---|---:|---:|---:|');
for (const r of rows) console.log(r);
