/**
 * PostgreSQL's own CPU per account batch, for each migration that defined `mg_account_batch`
 * (5 and the latest), in one database at once: each gets a fresh schema, and one connection
 * sends it batches shaped like the benchmark's (half window hit + hold, half settles of the
 * holds of the batch before), alternating between the two. The CPU is read from /proc for the
 * connection's backend, so PostgreSQL must run on this machine.
 *
 *   node --import tsx bench/pg-batch.ts            # POSTGRES_URL, or the tests' database
 *   PG_BATCH_REPS=1500 node --import tsx bench/pg-batch.ts
 */
import { readFileSync } from 'node:fs';
import postgres from 'postgres';
import { MIGRATIONS } from '../src/stores/postgres/migrations.js';
import { dropSchema, freshSchema, POSTGRES_URL } from './postgres-util.js';

const REPS = Number(process.env.PG_BATCH_REPS ?? 1000);
const SIZES = [2, 26, 52];
const sql = postgres(POSTGRES_URL, { max: 1, onnotice: () => {} });
const versions = [
  { name: 'migration 5', schema: freshSchema('mgpgb'), count: 5 },
  { name: `migration ${MIGRATIONS.length}`, schema: freshSchema('mgpgb'), count: MIGRATIONS.length },
];

/** The CPU (user + system) the connection's backend has used, in µs. */
async function backendCpu(): Promise<() => number> {
  const [row] = await sql.unsafe<{ pid: number }[]>('SELECT pg_backend_pid() AS pid');
  const tick = 1e6 / 100; // USER_HZ is 100 on Linux
  return () => {
    const fields = readFileSync(`/proc/${row!.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) * tick;
  };
}

let next = 0;
const hitHold = (hold: string) => ({
  op: 'hit_hold',
  bucket: 'key:k',
  limit: 1_000_000_000,
  window: 60_000,
  hold,
  key: 'k',
  amount: '1000',
  cap: null,
  month: '2026-11',
  ttl: 60_000,
});
const settle = (hold: string) => ({
  op: 'settle',
  hold,
  key: 'k',
  month: '2026-11',
  cost: '500',
  id: hold,
  model: 'm',
  units: { kind: 'tokens', prompt: 10, completion: 20 },
  measured: 'usage',
  upstream: null,
  at: 1,
});

/** µs of backend CPU per batch of `size` operations, over REPS batches. */
async function measure(cpu: () => number, schema: string, size: number): Promise<number> {
  const account = `acct-${size}`;
  await sql.unsafe(`INSERT INTO "${schema}".wallets VALUES ($1, 1000000000000000) ON CONFLICT DO NOTHING`, [account]);
  let previous: string[] = [];
  const start = cpu();
  for (let r = 0; r < REPS; r++) {
    const holds = Array.from({ length: size / 2 }, () => `h${next++}`);
    const ops = [...holds.map(hitHold), ...previous.map(settle)];
    await sql.unsafe(`SELECT "${schema}".mg_account_batch($1, $2::text::jsonb)`, [account, JSON.stringify(ops)]);
    previous = holds;
  }
  return (cpu() - start) / REPS;
}

async function main(): Promise<void> {
  for (const v of versions) {
    await sql.unsafe(`CREATE SCHEMA "${v.schema}"`);
    for (const m of MIGRATIONS.slice(0, v.count)) await sql.unsafe(m(`"${v.schema}"`, v.schema)).simple();
  }
  const cpu = await backendCpu();
  for (let round = 1; round <= 2; round++) {
    for (const v of round === 1 ? versions : [...versions].reverse()) {
      const cells: string[] = [];
      for (const size of SIZES) cells.push(`${size} ops ${(await measure(cpu, v.schema, size)).toFixed(0)} µs`);
      process.stdout.write(`round ${round}  ${v.name.padEnd(12)} backend CPU per batch: ${cells.join(', ')}\n`);
    }
  }
}

main()
  .catch((err: unknown) => {
    process.stderr.write(`pg-batch failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    await sql.end({ timeout: 1 });
    for (const v of versions) await dropSchema(v.schema).catch(() => {});
  });
