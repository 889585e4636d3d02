/**
 * A/B: two builds of the gateway (or one build under two sets of Node flags) measured in one
 * run against the same upstream, with the bare relay measured before, between and after them
 * in every round (bare, A, bare, B, bare; the order of A and B flips every round). Each
 * gateway's ratio is taken against the two bare runs next to it, and the median over the
 * rounds is printed. On a shared machine the CPU a call costs drifts within seconds, so two
 * versions are compared this way, never across two `npm run bench` runs.
 *
 *   # the change committed: the build before it into distA, the build with it into dist
 *   git checkout HEAD~1 -- src && npx tsup --out-dir distA && git checkout HEAD -- src && npx tsup
 *   AB_A=distA AB_B=dist node --import tsx bench/ab.ts
 *
 * (For a change not yet committed, `git stash` stands in for the first checkout and
 * `git stash pop` for the second; with nothing to stash, `pop` would apply an older stash.)
 *
 * Environment (defaults in brackets):
 *   AB_A [distA], AB_B [dist]   build folders (each with cli.js), relative to the repository or absolute
 *   AB_A_FLAGS [], AB_B_FLAGS []  Node flags of each, e.g. "--max-semi-space-size=32"
 *   AB_STORAGE [memory]         memory | sqlite (a temp file each) | redis (REDIS_URL, a fresh prefix each) |
 *                               postgres (POSTGRES_URL, a fresh schema each, dropped after)
 *   AB_KIND [plain]             plain | stream (one write) | paced (one event per write, 2 ms apart) |
 *                               paired (two events per write, 4 ms apart)
 *   AB_SHAPE [real]             real (the SDK's default request to an alias) | kind (the client asks for
 *                               usage, the upstream names the listed model); see bench/shapes.ts
 *   AB_ROUNDS [8]               rounds; 5 s per run (1 s not counted)
 *   AB_FRESH []                 1: new gateway processes every round (started in the round's
 *                               order, warmed up 3 s), so no process's luck lasts the whole run
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { gatewayConfig } from './fixtures.js';
import { type LoadResult, runLoad } from './load.js';
import { type Child, startNode } from './procs.js';
import { dropSchema, freshSchema, POSTGRES_URL } from './postgres-util.js';
import { median, type Shape } from './report.js';
import { deleteKeysWithPrefix, REDIS_URL } from './redis-util.js';
import { answerOf, requestOf } from './shapes.js';
import { postgresBackendPids, redisServerPid } from './storage-processes.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const env = process.env;
const flags = (v: string | undefined) => (v ?? '').split(/\s+/).filter(Boolean);
const variants = [
  { name: 'A', dist: env.AB_A ?? 'distA', flags: flags(env.AB_A_FLAGS) },
  { name: 'B', dist: env.AB_B ?? 'dist', flags: flags(env.AB_B_FLAGS) },
];
const STORAGE = env.AB_STORAGE ?? 'memory';
const KIND = env.AB_KIND === 'stream' || env.AB_KIND === 'paced' || env.AB_KIND === 'paired' ? env.AB_KIND : 'plain';
const SHAPE: Shape = env.AB_SHAPE === 'kind' ? 'kind' : 'real';
const ROUNDS = Number(env.AB_ROUNDS ?? 8);
const FRESH = env.AB_FRESH === '1';
if (!['memory', 'sqlite', 'redis', 'postgres'].includes(STORAGE)) throw new Error(`AB_STORAGE: unknown storage ${STORAGE}`);
for (const v of variants) if (!existsSync(resolve(ROOT, v.dist, 'cli.js'))) throw new Error(`${v.dist}/cli.js is missing: build it first (see the header of bench/ab.ts)`);

const KEY = `sk-mg-${randomBytes(24).toString('hex')}`;
const tmp = mkdtempSync(join(tmpdir(), 'model-gateway-ab-'));
const redisPrefix = `mgab:${randomBytes(4).toString('hex')}:`;
const pgSchemas = [freshSchema('mgab'), freshSchema('mgab')];
const children: Child[] = [];

/**
 * Each gateway's books: memory, a SQLite file of its own, a key prefix of its own on Redis, or
 * a schema of its own on PostgreSQL (so a change to a schema function is measured too).
 */
function storageOf(i: number): Record<string, unknown> {
  if (STORAGE === 'sqlite') return { driver: 'sqlite', path: join(tmp, `gateway-${i}.db`) };
  if (STORAGE === 'redis') return { driver: 'redis', url: REDIS_URL, keyPrefix: `${redisPrefix}${i}:` };
  if (STORAGE === 'postgres') return { driver: 'postgres', url: POSTGRES_URL, schema: pgSchemas[i] };
  return { driver: 'memory' };
}

async function main(): Promise<void> {
  const upstream = await startNode('upstream', ['--import', 'tsx', 'bench/upstream.ts', '--writes', 'single'], ROOT);
  children.push(upstream);
  const bare = await startNode('bare relay', ['--import', 'tsx', 'bench/bare-relay.ts', '--upstream', upstream.url, '--connections', '256'], ROOT);
  children.push(bare);
  const gateways: Child[] = [];
  const startGateway = async (i: number): Promise<Child> => {
    const v = variants[i]!;
    const file = join(tmp, `gateway-${i}.json`);
    writeFileSync(
      file,
      JSON.stringify(gatewayConfig({ upstreamUrl: upstream.url, key: KEY, storage: storageOf(i), journalDir: STORAGE === 'memory' ? null : join(tmp, `journal-${i}`), observe: true })),
    );
    const g = await startNode(`gateway ${v.name}`, [...v.flags, resolve(ROOT, v.dist, 'cli.js'), 'serve', '--config', file, '--port', '0'], ROOT);
    children.push(g);
    return g;
  };
  for (const i of variants.keys()) gateways.push(await startGateway(i));
  const body = requestOf(SHAPE, KIND);
  // The store works for the gateways: its CPU is not other load. Redis is one process; a
  // PostgreSQL gateway's backends are found after it has connected (and again after a restart).
  const redisPid = STORAGE === 'redis' ? await redisServerPid(REDIS_URL) : null;
  const storeName = STORAGE === 'redis' ? 'Redis' : STORAGE === 'postgres' ? 'PostgreSQL' : null;
  const storePids = async (c: Child): Promise<number[]> =>
    redisPid !== null ? [redisPid] : STORAGE === 'postgres' && c !== bare ? postgresBackendPids(POSTGRES_URL, c.pid) : [];
  const run = async (c: Child, auth: boolean, duration = 4): Promise<LoadResult> => {
    const store = await storePids(c);
    const others = STORAGE === 'postgres' ? (await Promise.all(gateways.map((g) => postgresBackendPids(POSTGRES_URL, g.pid)))).flat() : [];
    return runLoad({
      url: `${c.url}/v1/chat/completions`,
      body,
      // The bare relay passes the upstream's answer through; in the real shape the gateway's differs.
      expectBody: answerOf(SHAPE, KIND, auth ? 'gateway' : 'relay'),
      headers: auth ? { authorization: `Bearer ${KEY}` } : {},
      connections: 50,
      duration,
      settleS: 1,
      // The store's own CPU per call is read beside the gateway's (the two gateways never run at once).
      cpuPids: store.length ? { target: c.pid, store } : { target: c.pid },
      benchPids: [...new Set([...children.map((x) => x.pid), ...store, ...others])],
    });
  };
  const cpu = (r: LoadResult) => r.cpuMsPer1k.target ?? NaN;
  for (const c of [bare, ...gateways]) await run(c, c !== bare, 3);
  const ratios: number[][] = [[], []];
  const storeUs: number[][] = [[], []];
  const p99Ratios: number[][] = [[], []];
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 ? [1, 0] : [0, 1];
    if (FRESH && round > 0) {
      // New processes, started in this round's order, each warmed up like the first ones.
      for (const i of order) {
        const old = gateways[i]!;
        await old.stop(3_000);
        children.splice(children.indexOf(old), 1);
        gateways[i] = await startGateway(i);
        await run(gateways[i]!, true, 3);
      }
      process.stdout.write(`round ${round + 1}/${ROUNDS}  fresh gateway processes (pids ${gateways.map((g) => g.pid).join(', ')})\n`);
    }
    let before = await run(bare, false);
    if (before.errors) throw new Error(`the bare relay failed ${before.errors} calls: ${JSON.stringify(before.errorDetail)}`);
    for (const i of order) {
      const res = await run(gateways[i]!, true);
      const after = await run(bare, false);
      if (after.errors) throw new Error(`the bare relay failed ${after.errors} calls: ${JSON.stringify(after.errorDetail)}`);
      const base = (cpu(before) + cpu(after)) / 2;
      ratios[i]!.push(cpu(res) / base);
      if (storeName !== null) storeUs[i]!.push(res.cpuMsPer1k.store ?? NaN);
      p99Ratios[i]!.push(res.latency.p99 / ((before.latency.p99 + after.latency.p99) / 2));
      process.stdout.write(
        `round ${round + 1}/${ROUNDS}  ${variants[i]!.name} (${variants[i]!.dist}${variants[i]!.flags.length ? ` ${variants[i]!.flags.join(' ')}` : ''}): ` +
          `${cpu(res).toFixed(0)} µs/call, bare ${base.toFixed(0)}: ${(cpu(res) / base).toFixed(2)}x; ` +
          `p99 ${res.latency.p99.toFixed(1)} ms (${p99Ratios[i]!.at(-1)!.toFixed(2)}x the bare runs'); ` +
          (storeName === null ? '' : `${storeName} ${(res.cpuMsPer1k.store ?? NaN).toFixed(0)} µs/call; `) +
          `errors ${res.errors}; other load ${res.otherLoadCores.toFixed(2)} cores\n`,
      );
      if (res.errors) throw new Error(`${variants[i]!.name} failed ${res.errors} calls: ${JSON.stringify(res.errorDetail)}`);
      before = after;
    }
  }
  /** A list of ratios as its median and range. */
  const spread = (xs: number[]) => `${median(xs).toFixed(2)}x (${Math.min(...xs).toFixed(2)} - ${Math.max(...xs).toFixed(2)})`;
  process.stdout.write(
    `\n${STORAGE}, ${SHAPE} shape, ${KIND}, ${ROUNDS} rounds: CPU per call and p99 vs the bare relay, median (min - max):\n` +
      variants
        .map(
          (v, i) =>
            `  ${v.name} ${v.dist}: CPU ${spread(ratios[i]!)}; p99 ${spread(p99Ratios[i]!)}` +
            (storeName === null ? '' : `; ${storeName}'s own CPU ${median(storeUs[i]!).toFixed(0)} µs/call`),
        )
        .join('\n') +
      '\n',
  );
}

main()
  .catch((err: unknown) => {
    process.stderr.write(`ab failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    await Promise.allSettled(children.map((c) => c.stop(3_000)));
    rmSync(tmp, { recursive: true, force: true });
    if (STORAGE === 'postgres') for (const schema of pgSchemas) await dropSchema(schema).catch(() => {});
    if (STORAGE === 'redis') {
      const c = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(c, redisPrefix).catch(() => {});
      c.disconnect();
    }
  });
