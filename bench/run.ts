/**
 * The gateway benchmark: what the gateway costs over the least a Node relay does, on every
 * storage driver, with another Node AI gateway measured the same way for reference.
 *
 *   npm run bench
 *
 * On loopback, each as its own process: a fast OpenAI-compatible upstream (bench/upstream.ts),
 * the bare relay baseline (bench/bare-relay.ts), one gateway per storage through its CLI
 * (memory; sqlite in a temp file; postgres in a fresh schema, dropped after; redis under a
 * fresh key prefix, deleted after; real auth, rate limits, hold and settle, limits raised so
 * they never trip) and the peer, `@portkey-ai/gateway` from npm (bench/peer.ts). A storage whose
 * service does not answer, or a peer that cannot be installed or answers wrongly, is reported
 * as skipped with the reason.
 *
 * autocannon runs in this process. In every round and cell, each relay is measured once, with
 * the bare relay measured before, between and after them (bare, A, bare, B, ..., bare), and the
 * order flips every round; each ratio is taken against the mean of the two bare runs next to
 * it, and the report gives the median over the rounds. Every relay gets unmeasured load first (JIT, connection pools), and the first second
 * of every run is not counted (see bench/load.ts). Then 2,000 streamed calls are held open by
 * the slow upstream on a fresh gateway per storage (and a fresh bare relay, for reference) to
 * measure RSS growth over idle. Last, the Redis commands per billed call are counted
 * (bench/redis-commands.ts).
 *
 * Writes bench/results/<out>.json and <out>.md (out = "latest" by default).
 *
 * Environment knobs (defaults in brackets):
 *   BENCH_DURATION [4]        seconds measured per cell and relay
 *   BENCH_SETTLE [1]          seconds at the start of each run that are not counted (connection burst)
 *   BENCH_WARMUP [3]          seconds of unmeasured load per kind and relay before round 1
 *   BENCH_ROUNDS [5]          rounds; the median is reported
 *   BENCH_CONCURRENCY [50]    connections; the targets are judged at 50 (e.g. "1,50,256" adds cells)
 *   BENCH_KINDS [plain,stream,paced,paired]  plain; streamed in one write; streamed one event per write, 2 ms apart;
 *                                    streamed two events per write, 4 ms apart (for the per-event figure)
 *   BENCH_SHAPES [real,kind]  real: the SDK's default request to an alias (no stream_options, no max_tokens; the
 *                             upstream answers with its own model name), the headline; kind: the client asks for
 *                             usage and the upstream names the listed model (bench/shapes.ts)
 *   BENCH_STORAGE [memory,sqlite,postgres,redis]  the gateways to measure (postgres at POSTGRES_URL,
 *                             redis at REDIS_URL)
 *   BENCH_PEER [on]           "off": leave out @portkey-ai/gateway
 *   BENCH_HELD [2000]         held streams (0 skips that phase)
 *   BENCH_GATEWAY [dist]      "dist": node dist/cli.js, the published build (`npm run bench` builds it first);
 *                             "tsx": node --import tsx src/cli.ts (tsx keeps function names at run time,
 *                             a few µs per call, and runs a loader thread)
 *   BENCH_PROFILE []          "1" / "gateway": run the load-phase gateways with --cpu-prof
 *                             (profiles in bench/results/profiles, summary printed); "all": bare too
 *   BENCH_OUT [latest]        results file name ("profile" when BENCH_PROFILE is set; "latest-<storages>"
 *                             when BENCH_STORAGE names fewer than all four)
 *   BENCH_PROMPT_BYTES [0]    pad every user message by this many bytes (each call's prompt is unique either way)
 *   BENCH_FIXED_PROMPT []     "1": send the very same prompt every call (not real traffic; shows what prompt caches save)
 *   BENCH_OBSERVE [on]        "on": access log (to the gateway's stdout pipe) and /metrics on, as a
 *                             production gateway runs; "off": both off, to see what they cost
 *   BENCH_UPSTREAM_WRITES [single]  "single": the upstream writes a streamed answer in one write;
 *                             "chunked": 22 writes back to back (inflates the baseline's cost)
 *   BENCH_NODE_FLAGS []       Node flags of every relay process, the bare relay and the peer included
 *   BENCH_RETRIES [2]         a measurement that saw > 0.2 cores of other load is taken again up to this often
 *   BENCH_WORKERS [sqlite,redis]  storages on which `serve --workers 2` is measured against 1 ("off": none)
 *   BENCH_WORKERS_ROUNDS [3]  rounds of that comparison
 *   BENCH_CACHE [on]          "off": skip the response-cache phase (a hit's CPU per call against a plain call's, memory)
 *   BENCH_GUARDRAILS [on]     "off": leave out the output guardrails' CPU per streamed event (in this
 *                             process, last, a few seconds: bench/guardrail-events.ts)
 *
 * Targets (bench/targets.ts) are printed as met / not met. They are a report, never a test.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { ALIAS_MODEL, ALIAS_SERVED_AS, ALIAS_UPSTREAM_MODEL, gatewayConfig, PLAIN_REQUEST } from './fixtures.js';
import { type CacheHitsResult, cacheHits } from './cache-hits.js';
import type { GuardrailEventCost } from './guardrail-report.js';
import { type HeldResult, heldStreams } from './held.js';
import { type LoadResult, runLoad } from './load.js';
import { installPeer, PEER_LABEL, PEER_PACKAGE, PEER_READY, peerHeaders, sameContentAs } from './peer.js';
import { dropSchema, freshSchema, POSTGRES_URL, postgresProblem } from './postgres-util.js';
import { type Child, freePort, memoryOf, RssSampler, sleep, startNode } from './procs.js';
import type { CommandCount } from './redis-commands.js';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from './redis-util.js';
import {
  type Cell,
  type CellSummary,
  evaluate,
  fmtInt,
  fmtMb,
  fmtMs,
  type Kind,
  KIND_NAMES,
  NOISY_CORES,
  SHAPE_NAMES,
  type Shape,
  type StorageState,
  summarizeCell,
  type TargetId,
} from './report.js';
import { renderMarkdown } from './markdown.js';
import { type Answerer, answerOf, requestOf } from './shapes.js';
import { postgresBackendPids, redisServerPid } from './storage-processes.js';
import { HEADLINE_C, STORAGES, type Storage } from './targets.js';
import { formatSummary, summarize } from './top-profile.js';
import { type WorkersResult, workersThroughput } from './workers.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const RESULTS = join(ROOT, 'bench/results');
const PROFILES = join(RESULTS, 'profiles');
/** Where the peer is installed on demand (gitignored; never a dependency of the project). */
const PEER_DIR = join(ROOT, 'bench/.peer');

const env = process.env;
const num = (v: string | undefined, d: number) => (v === undefined || v === '' ? d : Number(v));
const list = (v: string | undefined, d: string) => (v === undefined || v === '' ? d : v).split(',').map((s) => s.trim());
// 5 rounds of 4 s: more rounds steady the per-round ratios more than longer runs do. A full run
// (5 relays and 6 bare-relay runs x 4 kinds x 2 shapes x 5 rounds x 5 s, plus warm-up, workers and
// held streams) takes about 45 minutes on a quiet 2-core machine.
const DURATION = num(env.BENCH_DURATION, 4);
const SETTLE = num(env.BENCH_SETTLE, 1);
const WARMUP = num(env.BENCH_WARMUP, 3);
const ROUNDS = num(env.BENCH_ROUNDS, 5);
const CONCURRENCY = list(env.BENCH_CONCURRENCY, String(HEADLINE_C)).map(Number);
const KINDS = list(env.BENCH_KINDS, 'plain,stream,paced,paired') as Kind[];
for (const k of KINDS) if (!KIND_NAMES.includes(k)) throw new Error(`BENCH_KINDS: unknown kind ${k}`);
const SHAPES = list(env.BENCH_SHAPES, SHAPE_NAMES.join(',')) as Shape[];
for (const s of SHAPES) if (!SHAPE_NAMES.includes(s)) throw new Error(`BENCH_SHAPES: unknown shape ${s}`);
const HELD = num(env.BENCH_HELD, 2000);
/** How long after it listens a gateway's idle RSS is read: past V8's memory reducer's first pass (8 s). */
const IDLE_SETTLE_MS = num(env.BENCH_IDLE_SETTLE_MS, 15_000);
const GATEWAY_MODE = env.BENCH_GATEWAY === 'tsx' ? 'tsx' : 'dist';
const PROFILE = env.BENCH_PROFILE === 'all' ? 'all' : env.BENCH_PROFILE ? 'gateway' : '';
const STORAGE_LIST = list(env.BENCH_STORAGE, STORAGES.join(',')) as Storage[];
for (const s of STORAGE_LIST) if (!STORAGES.includes(s)) throw new Error(`BENCH_STORAGE: unknown storage ${s}`);
const ALL_STORAGES = STORAGES.every((s) => STORAGE_LIST.includes(s));
const PEER = env.BENCH_PEER !== 'off' && env.BENCH_PEER !== '0';
const OUT = env.BENCH_OUT ?? (PROFILE ? 'profile' : ALL_STORAGES ? 'latest' : `latest-${STORAGE_LIST.join('-')}`);
/** The same prompt on every call (shows what a prompt-keyed cache would save; not real traffic). */
const FIXED_PROMPT = env.BENCH_FIXED_PROMPT === '1';
/** A measurement disturbed by other load is taken again, up to this many times (the quietest is kept). */
const RETRIES = num(env.BENCH_RETRIES, 2);
const OBSERVE = env.BENCH_OBSERVE !== 'off';
/** How the upstream writes a streamed answer: "single" (one write, the default) or "chunked" (22 writes). */
const UPSTREAM_WRITES = env.BENCH_UPSTREAM_WRITES === 'chunked' ? 'chunked' : 'single';
/**
 * Node flags every relay process runs with, the bare relay and the peer alike, so the ratios
 * compare code, not runtime settings (e.g. "--max-semi-space-size=32"). Default: none.
 */
const NODE_FLAGS = (env.BENCH_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
/** The storages on which `serve --workers 2` is measured against one process ("off": none). */
const WORKERS_ON = env.BENCH_WORKERS === 'off' ? [] : list(env.BENCH_WORKERS, 'sqlite,redis');
const WORKERS_ROUNDS = num(env.BENCH_WORKERS_ROUNDS, 3);
const CACHE_PHASE = env.BENCH_CACHE !== 'off';

/** What the report says about the real shape (the kind shape's text is as it always was). */
const REAL_SHAPE_NOTE =
  `The real shape (the headline) sends what the openai SDK sends by default, no stream_options and no max_tokens, for the alias ${ALIAS_MODEL}, ` +
  `which the gateway serves as ${ALIAS_UPSTREAM_MODEL} and the upstream answers as ${ALIAS_SERVED_AS}: the gateway adds include_usage and its output cap, ` +
  'rewrites the model name in every answer and event, and drops the usage chunk its client did not ask for. The upstream writes that chunk either way, ' +
  'so every relay reads the same 22 events; the bare relay (and the peer) pass it through, one event more than the gateway writes. ' +
  'The kind shape is the one every earlier report measured: the client asks for usage and the upstream names the listed model, so a stream passes through untouched.';

const KEY = `sk-mg-${randomBytes(24).toString('hex')}`;
const AUTH = { authorization: `Bearer ${KEY}` };
const TSX = ['--import', 'tsx'];
const stamp = new Date().toISOString().replace(/[:.]/g, '-');

const LABEL: Record<TargetId, string> = {
  bare: 'bare relay (baseline)',
  memory: 'gateway, memory',
  sqlite: 'gateway, sqlite',
  postgres: 'gateway, postgres',
  redis: 'gateway, redis',
  peer: `${PEER_LABEL} (peer)`,
};

/** A relay under load: its process, how to call it, and which processes do its storage work. */
interface Relay {
  id: TargetId;
  child: Child;
  headers: Record<string, string>;
  /** "content" for a peer that re-serialises answers: bodies are compared parsed, not byte for byte. */
  bodyCheck: 'bytes' | 'content';
  /** The storage service's processes serving this relay, looked up before each measurement. */
  storagePids: () => Promise<number[]>;
}


/**
 * --cpu-prof flags writing into a directory of their own: with --import tsx the loader-hooks
 * thread writes a profile too, so names are Node's default CPU.<date>.<time>.<pid>.<tid>.<seq>
 * and the main thread's is the one with tid 0.
 */
const profDir = (name: string) => join(PROFILES, `${name}-${stamp}`);
const profFlags = (name: string) => ['--cpu-prof', '--cpu-prof-dir', profDir(name)];

function mainThreadProfile(name: string): string | null {
  const dir = profDir(name);
  if (!existsSync(dir)) return null;
  const file = readdirSync(dir).find((f) => /^CPU\.\d+\.\d+\.\d+\.0\.\d+\.cpuprofile$/.test(f));
  return file ? join(dir, file) : null;
}

function gatewayArgs(configFile: string, profileAs: string | null): string[] {
  const prof = profileAs ? profFlags(profileAs) : [];
  if (GATEWAY_MODE === 'dist') {
    if (!existsSync(join(ROOT, 'dist/cli.js'))) throw new Error('BENCH_GATEWAY=dist but dist/cli.js is missing: run `npm run build` first');
    return [...NODE_FLAGS, ...prof, 'dist/cli.js', 'serve', '--config', configFile, '--port', '0'];
  }
  return [...NODE_FLAGS, ...prof, ...TSX, 'src/cli.ts', 'serve', '--config', configFile, '--port', '0'];
}

function bareArgs(upstreamUrl: string, connections: number, profile: boolean): string[] {
  const prof = profile ? profFlags('bare') : [];
  return [...NODE_FLAGS, ...prof, ...TSX, 'bench/bare-relay.ts', '--upstream', upstreamUrl, '--connections', String(connections)];
}

/** The gateways answer for themselves; the bare relay and the peer pass the upstream's answer through. */
const answererOf = (id: TargetId): Answerer => (id === 'bare' || id === 'peer' ? 'relay' : 'gateway');
/** The peer may re-serialise: its body is then checked by parsed content. */
const contentCheck = (shape: Shape, kind: Kind) => sameContentAs(answerOf(shape, kind, 'relay'));

/**
 * One plain and one streamed call through a relay. Ours must answer byte for byte; the peer may
 * re-serialise, so when its bytes differ its answer must still say the same (parsed content).
 * Returns how the relay's bodies are checked under load.
 */
async function sanityCheck(id: TargetId, url: string, headers: Record<string, string>): Promise<'bytes' | 'content'> {
  let check: 'bytes' | 'content' = 'bytes';
  for (const shape of SHAPES) {
    for (const kind of KIND_NAMES) {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: requestOf(shape, kind).replace('[<id>]', 'sanity'),
      });
      const text = await res.text();
      if (res.status === 200 && text === answerOf(shape, kind, answererOf(id))) continue;
      if (id === 'peer' && res.status === 200 && contentCheck(shape, kind)(text)) {
        check = 'content';
        continue;
      }
      throw new Error(`${LABEL[id]} answered ${res.status} with an unexpected ${shape}-shape ${kind} body:\n${text.slice(0, 600)}`);
    }
  }
  return check;
}

/** The commit measured, "+dirty" when src/ has uncommitted changes. */
function gitDescribe(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src'], { cwd: ROOT, encoding: 'utf8' }).trim();
    return dirty ? `${head}+dirty` : head;
  } catch {
    return 'unknown';
  }
}

const firstLine = (err: unknown) => (err instanceof Error ? err.message : String(err)).split('\n')[0]!;

async function main(): Promise<void> {
  mkdirSync(RESULTS, { recursive: true });
  if (PROFILE) mkdirSync(PROFILES, { recursive: true });
  const tmp = mkdtempSync(join(tmpdir(), 'model-gateway-bench-'));
  const children: Child[] = [];
  const track = (c: Child) => {
    children.push(c);
    return c;
  };
  const began = Date.now();
  const log = (s: string) => process.stdout.write(`${s}\n`);
  const machine = {
    gitCommit: gitDescribe(),
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    loadAvgAtStart: loadavg()[0] ?? NaN,
  };
  log(`model-gateway bench at ${machine.gitCommit}: ${machine.cores} x ${machine.cpu}, node ${machine.node}, load average ${machine.loadAvgAtStart.toFixed(2)}`);
  if (machine.loadAvgAtStart > 0.5 * machine.cores) log('warning: the machine is busy; other processes will distort the numbers (see "other load" per cell)');
  log(
    `cells: ${SHAPES.join(' and ')} shape x ${KINDS.join(', ')} at c=${CONCURRENCY.join(', ')}; ${ROUNDS} rounds x (${SETTLE} s settle + ${DURATION} s measured) per relay; ` +
      `gateway via ${GATEWAY_MODE === 'tsx' ? 'node --import tsx src/cli.ts' : 'node dist/cli.js'}; access log and metrics ${OBSERVE ? 'on' : 'off'}` +
      `${PROFILE ? `; profiling ${PROFILE}` : ''}`,
  );

  // ---- which storages and peer can run here ----
  const storages: StorageState[] = [];
  for (const storage of STORAGE_LIST) {
    const problem = storage === 'postgres' ? await postgresProblem() : storage === 'redis' ? await redisProblem() : null;
    const skipped = problem === null ? null : `${storage === 'postgres' ? `PostgreSQL at ${POSTGRES_URL}` : `Redis at ${REDIS_URL}`} does not answer (${problem})`;
    if (skipped) log(`skipping ${storage}: ${skipped}`);
    storages.push({ storage, skipped });
  }
  const measured = storages.filter((s) => !s.skipped).map((s) => s.storage);
  let peerSkipped: string | null = PEER ? null : 'BENCH_PEER=off';
  const peerInstall = PEER ? await installPeer(PEER_DIR, log) : null;
  if (peerInstall && 'skipped' in peerInstall) peerSkipped = peerInstall.skipped;
  if (peerSkipped && PEER) log(`skipping the peer: ${peerSkipped}`);

  // Where each gateway keeps its books; removed in `finally`.
  const pgSchema = freshSchema('mgbench');
  const redisPrefix = `mgbench:${randomBytes(4).toString('hex')}:`;
  const storageConfig = (s: Storage) =>
    s === 'sqlite'
      ? { driver: 'sqlite', path: join(tmp, 'gateway.db') }
      : s === 'postgres'
        ? { driver: 'postgres', url: POSTGRES_URL, schema: pgSchema }
        : s === 'redis'
          ? { driver: 'redis', url: REDIS_URL, keyPrefix: redisPrefix }
          : { driver: 'memory' };
  const redisPid = measured.includes('redis') ? await redisServerPid(REDIS_URL) : null;
  const storagePidsOf = (s: Storage, child: Child) => async (): Promise<number[]> => {
    if (s === 'postgres') return postgresBackendPids(POSTGRES_URL, child.pid).catch(() => []);
    if (s === 'redis') return redisPid === null ? [] : [redisPid];
    return [];
  };
  const configFiles: Partial<Record<Storage, string>> = {};
  // A CLI's RSS 1 s after it listens still holds the garbage of loading its modules (ioredis
  // alone leaves ~6 MB, and grows the young generation to fit it); V8's memory reducer returns
  // that about 8 s later. The target judges the process once settled, idle; both are reported.
  const startRss: Partial<Record<Storage, number>> = {};
  const idleRss: Partial<Record<Storage, number>> = {};
  const gatewayStarts: { s: Storage; pid: number; at: number }[] = [];

  let redisCommands: CommandCount | { skipped: string } | { failed: string } | null = null;
  try {
    const upstream = track(await startNode('upstream', [...TSX, 'bench/upstream.ts', '--writes', UPSTREAM_WRITES], ROOT));
    for (const s of measured) {
      const file = join(tmp, `gateway-${s}.config.json`);
      writeFileSync(file, JSON.stringify(gatewayConfig({ upstreamUrl: upstream.url, key: KEY, storage: storageConfig(s), journalDir: s === 'memory' ? null : join(tmp, `journal-${s}`), observe: OBSERVE }), null, 2));
      configFiles[s] = file;
    }

    // ---- the relays under load ----
    const relays: Relay[] = [];
    const none = async () => [];
    const bare = track(await startNode('bare relay', bareArgs(upstream.url, 256, PROFILE === 'all'), ROOT));
    relays.push({ id: 'bare', child: bare, headers: {}, bodyCheck: 'bytes', storagePids: none });
    for (const s of measured) {
      const child = track(await startNode(`gateway (${s})`, gatewayArgs(configFiles[s]!, PROFILE ? `gateway-${s}` : null), ROOT));
      // What the CLI holds before its first call: heavy parts load when first needed.
      await sleep(1_000);
      const started = memoryOf(child.pid)?.rss;
      if (started !== undefined) startRss[s] = started;
      gatewayStarts.push({ s, pid: child.pid, at: Date.now() - 1_000 });
      relays.push({ id: s, child, headers: AUTH, bodyCheck: 'bytes', storagePids: storagePidsOf(s, child) });
    }
    if (peerInstall && !('skipped' in peerInstall)) {
      try {
        const port = await freePort();
        const child = track(await startNode('peer', [...NODE_FLAGS, peerInstall.entry, `--port=${port}`, '--headless'], peerInstall.dir, 60_000, PEER_READY));
        const url = `http://127.0.0.1:${port}`;
        const headers = peerHeaders(upstream.url);
        const bodyCheck = await sanityCheck('peer', url, headers).catch(async (err: unknown) => {
          await child.stop(3_000);
          throw err;
        });
        relays.push({ id: 'peer', child: { ...child, url }, headers, bodyCheck, storagePids: none });
      } catch (err) {
        peerSkipped = `it did not answer correctly: ${firstLine(err)}`;
        log(`skipping the peer: ${peerSkipped}`);
      }
    }
    // Idle RSS is read before the sanity checks make each gateway's first call.
    for (const g of gatewayStarts) {
      await sleep(Math.max(0, g.at + IDLE_SETTLE_MS - Date.now()));
      const settled = memoryOf(g.pid)?.rss;
      if (settled !== undefined) idleRss[g.s] = settled;
    }
    log(`upstream ${upstream.url} (pid ${upstream.pid}); ${relays.map((r) => `${LABEL[r.id]} ${r.child.url} (pid ${r.child.pid})`).join('; ')}`);
    for (const r of relays) if (r.id !== 'peer') await sanityCheck(r.id, r.child.url, r.headers);

    const loadSpec = (r: Relay, shape: Shape, kind: Kind, c: number) => ({
      url: `${r.child.url}/v1/chat/completions`,
      body: requestOf(shape, kind),
      expectBody: answerOf(shape, kind, answererOf(r.id)),
      ...(r.bodyCheck === 'content' ? { verifyBody: contentCheck(shape, kind) } : {}),
      headers: r.headers,
      connections: c,
    });
    const dropPeer = (reason: string) => {
      peerSkipped = reason;
      log(`skipping the peer: ${reason}`);
      const i = relays.findIndex((r) => r.id === 'peer');
      if (i >= 0) void relays.splice(i, 1)[0]!.child.stop(3_000);
    };

    // JIT, pools and lazy state warm up once for every relay before anything is measured.
    if (WARMUP > 0) {
      for (const r of [...relays]) {
        warming: for (const shape of SHAPES) {
          for (const kind of KINDS) {
            const w = await runLoad({ ...loadSpec(r, shape, kind, HEADLINE_C), duration: WARMUP });
            if (!w.errors) continue;
            const why = `${w.errors} calls failed while warming up: ${JSON.stringify(w.errorDetail)}`;
            if (r.id !== 'peer') throw new Error(`${LABEL[r.id]}: ${why}`);
            dropPeer(why);
            break warming;
          }
        }
      }
    }

    const allPids = () => [upstream.pid, ...relays.map((r) => r.child.pid)];
    const sampler = new RssSampler(allPids());
    const cells: Cell[] = [];
    for (const shape of SHAPES) for (const kind of KINDS) for (const c of CONCURRENCY) cells.push({ shape, kind, c, runs: {}, baselines: {} });
    const measure = async (r: Relay, { shape, kind, c }: Cell): Promise<LoadResult> => {
      const storagePids = await r.storagePids();
      const once = () =>
        runLoad({
          ...loadSpec(r, shape, kind, c),
          duration: DURATION,
          settleS: SETTLE,
          uniqueIds: !FIXED_PROMPT,
          cpuPids: { target: r.child.pid, upstream: upstream.pid, ...(storagePids.length ? { storage: storagePids } : {}) },
          // The storage service works for this relay: its CPU is not "other load".
          benchPids: [...allPids(), ...storagePids],
        });
      let res = await once();
      for (let retry = 0; retry < RETRIES && res.otherLoadCores > NOISY_CORES; retry++) {
        log(`  (${LABEL[r.id]} ${shape} ${kind} c=${c} saw ${res.otherLoadCores.toFixed(2)} cores of other load: measuring again)`);
        await sleep(2_000);
        const again = await once();
        // The quietest attempt is kept, but no attempt's errors are dropped.
        res = { ...(again.otherLoadCores < res.otherLoadCores ? again : res), errors: res.errors + again.errors };
      }
      return res;
    };
    const report = (round: number, { shape, kind, c }: Cell, r: Relay, res: LoadResult) => {
      log(
        `round ${round + 1}/${ROUNDS}  ${shape.padEnd(4)} ${kind.padEnd(6)} c=${String(c).padEnd(3)}  ${LABEL[r.id].padEnd(34)}  ` +
          `${fmtInt(res.rps).padStart(6)} req/s  p50 ${fmtMs(res.latency.p50)} ms  p99 ${fmtMs(res.latency.p99)} ms  ` +
          `cpu ${fmtInt(res.cpuMsPer1k.target ?? NaN)} µs/call` +
          `${res.cpuMsPer1k.storage === undefined ? '' : ` (+${fmtInt(res.cpuMsPer1k.storage)} storage)`}  ` +
          `other load ${res.otherLoadCores.toFixed(2)} cores  errors ${res.errors}${res.errors ? ` ${JSON.stringify(res.errorDetail)}` : ''}`,
      );
      if (upstream.proc.exitCode !== null) throw new Error(`upstream exited:\n${upstream.stderrTail()}`);
      for (const x of [...relays]) {
        if (x.child.proc.exitCode === null) continue;
        if (x.id !== 'peer') throw new Error(`${LABEL[x.id]} exited:\n${x.child.stderrTail()}`);
        dropPeer(`it exited during the load: ${x.child.stderrTail().slice(-300)}`);
      }
    };
    // The bare relay is measured between every two relays (bare, A, bare, B, ..., bare), and
    // each relay's ratio is taken against the two bare runs on either side of it: the CPU a
    // call costs on a shared machine drifts within seconds, so the nearest baseline is the
    // fairest one.
    for (let round = 0; round < ROUNDS; round++) {
      for (const cell of cells) {
        const others = relays.filter((r) => r.id !== 'bare');
        const order = round % 2 === 0 ? others : [...others].reverse();
        const bareRelay = relays.find((r) => r.id === 'bare')!;
        const measureBare = async () => {
          const res = await measure(bareRelay, cell);
          (cell.runs.bare ??= []).push(res);
          report(round, cell, bareRelay, res);
          return res;
        };
        let before = await measureBare();
        for (const r of order) {
          if (!relays.includes(r)) continue;
          const res = await measure(r, cell);
          (cell.runs[r.id] ??= []).push(res);
          report(round, cell, r, res);
          const after = await measureBare();
          (cell.baselines[r.id] ??= []).push([before, after]);
          before = after;
        }
      }
    }
    // A peer dropped part-way has no complete rounds to compare.
    if (peerSkipped) {
      for (const cell of cells) {
        delete cell.runs.peer;
        delete cell.baselines.peer;
      }
    }
    sampler.stop();
    const peakRss: Partial<Record<TargetId, number>> = {};
    for (const r of relays) peakRss[r.id] = Math.max(memoryOf(r.child.pid)?.hwm ?? 0, sampler.peak(r.child.pid));
    for (const r of relays) await r.child.stop();
    const summaries: CellSummary[] = cells.map(summarizeCell);

    // ---- two workers against one process, plain calls in each shape ----
    const workers: WorkersResult[] = [];
    for (const [s, shape] of measured.filter((x) => WORKERS_ON.includes(x)).flatMap((x) => SHAPES.map((sh) => [x, sh] as const))) {
      const w = await workersThroughput({
        storage: s,
        shape,
        serveArgs: gatewayArgs(configFiles[s]!, null),
        cwd: ROOT,
        request: requestOf(shape, 'plain'),
        answer: answerOf(shape, 'plain', 'gateway'),
        headers: AUTH,
        duration: DURATION,
        settleS: SETTLE,
        rounds: WORKERS_ROUNDS,
        benchPids: [upstream.pid],
      });
      workers.push(w);
      log(
        `workers  ${s} (${shape} shape): 1 process ${fmtInt(w.one.rps)} req/s (${fmtInt(w.one.cpuUsPerCall)} µs/call), ` +
          `2 workers ${fmtInt(w.two.rps)} req/s (${fmtInt(w.two.cpuUsPerCall)} µs/call): ${(w.two.rps / w.one.rps).toFixed(2)}x`,
      );
    }

    // ---- memory under held streams (fresh processes) ----
    const held: Partial<Record<'bare' | Storage, HeldResult>> = {};
    if (HELD > 0) {
      const warm = async (name: string, url: string, headers: Record<string, string>) => {
        for (const kind of ['plain', 'stream'] as const) {
          const w = await runLoad({ url: `${url}/v1/chat/completions`, body: requestOf('kind', kind), expectBody: answerOf('kind', kind, 'gateway'), headers, connections: 10, duration: 1 });
          if (w.errors) throw new Error(`${name} failed ${w.errors} calls before the held-stream test: ${JSON.stringify(w.errorDetail)}`);
        }
        await sleep(1_000);
      };
      const report = (name: string, h: HeldResult) =>
        log(
          `held streams  ${name.padEnd(22)}  ${h.count} opened in ${h.openSeconds.toFixed(1)} s (upstream held ${h.upstreamHeld}); ` +
            `idle ${fmtMb(h.idleRss)}, held ${fmtMb(h.heldRss)} (peak ${fmtMb(h.heldPeakRss)}): +${fmtMb(h.growth)}, ` +
            `${h.perStreamKb.toFixed(1)} KB/stream; completed ${h.completed}, errors ${h.errors}${h.firstError ? ` (${h.firstError})` : ''}`,
        );
      for (const s of measured) {
        const gw = track(await startNode(`gateway (${s}, held)`, gatewayArgs(configFiles[s]!, null), ROOT));
        await warm(LABEL[s], gw.url, AUTH);
        held[s] = await heldStreams({ url: gw.url, path: '/v1/chat/completions', headers: AUTH, pid: gw.pid, upstreamUrl: upstream.url, count: HELD });
        report(LABEL[s], held[s]!);
        await gw.stop();
      }
      const bare2 = track(await startNode('bare relay (held)', bareArgs(upstream.url, 4096, false), ROOT));
      await warm(LABEL.bare, bare2.url, {});
      held.bare = await heldStreams({ url: bare2.url, path: '/slow/v1/chat/completions', headers: {}, pid: bare2.pid, upstreamUrl: upstream.url, count: HELD });
      report(LABEL.bare, held.bare);
      await bare2.stop();
    }
    // ---- a response-cache hit against a plain call (memory) ----
    let cache: CacheHitsResult | { failed: string } | null = null;
    if (CACHE_PHASE) {
      try {
        cache = await cacheHits({
          upstreamUrl: upstream.url,
          upstreamPid: upstream.pid,
          key: KEY,
          dir: tmp,
          serveArgs: (file) => gatewayArgs(file, null),
          cwd: ROOT,
          duration: DURATION,
          settleS: SETTLE,
          rounds: Math.min(ROUNDS, 3),
          connections: HEADLINE_C,
        });
        log(
          `cache    memory: plain call ${fmtInt(cache.plainUs)} µs/call (${fmtInt(cache.plainRps)} req/s), hit ${fmtInt(cache.hitUs)} µs/call (${fmtInt(cache.hitRps)} req/s): ` +
            `${cache.ratio.toFixed(2)}x a plain call's CPU; a streamed hit ${fmtInt(cache.streamHitUs)} µs/call; errors ${cache.errors}`,
        );
      } catch (err) {
        cache = { failed: firstLine(err) };
        log(`cache phase failed: ${cache.failed}`);
      }
    }
    await upstream.stop();

    // ---- Redis commands per billed call ----
    if (STORAGE_LIST.includes('redis')) {
      const skipped = storages.find((s) => s.storage === 'redis')?.skipped;
      if (skipped) redisCommands = { skipped };
      else {
        try {
          // Loaded only here: it builds a gateway in this process, which the load phase must not carry.
          const { countRedisCommands } = await import('./redis-commands.js');
          redisCommands = await countRedisCommands(REDIS_URL, 50);
          log(`Redis commands per billed chat call: ${redisCommands.perCall.toFixed(2)} (${JSON.stringify(redisCommands.byCommand)} over ${redisCommands.calls} calls)`);
        } catch (err) {
          redisCommands = { failed: firstLine(err) };
        }
      }
    }

    // ---- output guardrails per streamed event (in this process, after every load phase) ----
    let guardrails: GuardrailEventCost | null = null;
    if (env.BENCH_GUARDRAILS !== 'off') {
      const { guardrailEventCost } = await import('./guardrail-events.js');
      guardrails = guardrailEventCost();
      log(
        `output guardrails per streamed event: ${guardrails.bareUs.toFixed(2)} µs bare, ${guardrails.guardedUs.toFixed(2)} µs guarded (+${guardrails.addedUs.toFixed(2)} µs); ` +
          `real shape, unguarded: ${guardrails.realUs?.toFixed(2)} µs`,
      );
    }

    // ---- report ----
    const peerMeasured = summaries.some((c) => c.targets.peer !== undefined);
    const checks = evaluate({ cells: summaries, kinds: KINDS, shapes: SHAPES, storages, held, heldCount: HELD, redisCommands, idleRss, startRss, peerMeasured });
    const peerRow = PEER ? [{ id: 'peer' as const, label: LABEL.peer, skipped: peerSkipped }] : [];
    const rows = [
      { id: 'bare' as const, label: LABEL.bare, skipped: null },
      ...storages.map((s) => ({ id: s.storage, label: LABEL[s.storage], skipped: s.skipped })),
      ...peerRow,
    ];
    const command = [
      ...Object.entries(env)
        .filter(([k]) => k.startsWith('BENCH_'))
        .map(([k, v]) => `${k}=${v}`),
      'npm run bench',
    ].join(' ');
    const peer = relays.find((r) => r.id === 'peer');
    const notes = [
      'CPU µs/call is the CPU time the relay process used per completed call (from /proc). Storage service CPU is, for postgres, the PostgreSQL backends serving that ' +
        "gateway's connections, and for redis the Redis server process (which includes any other client of the same server); it is not in the gateway's figure or ratio.",
      ...(peer
        ? [
            `The peer was installed from npm on demand and routed to the same upstream with x-portkey-provider: openai and x-portkey-custom-host. ` +
              (peer.bodyCheck === 'bytes'
                ? 'Its answers were checked byte for byte, as ours are (they were byte-identical).'
                : 'Its answers differ in bytes from the upstream\'s, so they were checked by parsed content (the JSON body, or every SSE event\'s JSON).'),
          ]
        : []),
    ];
    if (redisCommands && 'failed' in redisCommands) notes.push(`The Redis command count failed: ${redisCommands.failed}`);
    if (cache && 'failed' in cache) notes.push(`The response-cache phase failed: ${cache.failed}`);
    else if (cache)
      notes.push(
        `Response cache (memory, one process, c=${HEADLINE_C}): a hit costs the gateway ${fmtInt(cache.hitUs)} µs of CPU per call against ${fmtInt(cache.plainUs)} µs for the same plain call ` +
          `sent upstream (Cache-Control: no-store): ${cache.ratio.toFixed(2)}x; a streamed hit ${fmtInt(cache.streamHitUs)} µs. Median of ${Math.min(ROUNDS, 3)} rounds.`,
      );
    const intro =
      `The gateway on ${ALL_STORAGES ? 'every storage driver' : `${STORAGE_LIST.join(', ')} storage`}${PEER ? `, and ${PEER_PACKAGE} as a peer,` : ''} ` +
      'against a bare Node relay (node:http in, undici out, JSON parsed once each way, streams piped), ' +
      `all in front of the same fast local upstream, which writes a streamed answer in ${UPSTREAM_WRITES === 'single' ? 'one write' : '22 writes'}. ` +
      `${machine.cores} cores (${machine.cpu}) shared by upstream, relays and load generator; node ${machine.node}; commit ${machine.gitCommit}; ` +
      `gateways run as \`${GATEWAY_MODE === 'tsx' ? 'node --import tsx src/cli.ts serve' : 'node dist/cli.js serve'}\` with auth, rate limits, hold and settle, ` +
      `access log and metrics ${OBSERVE ? 'on' : 'off'}. ` +
      `${NODE_FLAGS.length ? `Every relay process (bare, gateways${PEER ? ', peer' : ''}) runs with \`node ${NODE_FLAGS.join(' ')}\`. ` : "Every relay process runs with Node's default flags. "}` +
      `Median of ${ROUNDS} rounds of ${DURATION} s per relay and cell: in each round the bare relay runs before, between and after the others ` +
      `(whose order flips every round), and each ratio is taken against the mean of the bare runs just before and just after it ` +
      `(each run's first ${SETTLE} s, the connection burst, not counted). ` +
      (FIXED_PROMPT
        ? 'Every call sends the same prompt (BENCH_FIXED_PROMPT=1: caches keyed on prompt text always hit; not real traffic); '
        : `Every call sends a unique user message (${PLAIN_REQUEST.length} B body) after a fixed system prompt; `) +
      'streamed calls get 20 chunks + usage + [DONE]: in one write ("stream, one write"), one event per write, 2 ms apart ("stream, paced"), or two events per write, 4 ms apart ("stream, paired").' +
      (SHAPES.includes('real') ? ` ${REAL_SHAPE_NOTE}` : '');
    const took = (Date.now() - began) / 1000;
    const md = renderMarkdown({
      intro,
      cells: summaries,
      kinds: KINDS,
      concurrency: CONCURRENCY,
      rows,
      held,
      heldCount: HELD,
      peakRss,
      checks,
      notes,
      allRuns: cells.flatMap((c) => Object.values(c.runs).flat()),
      retries: RETRIES,
      workers,
      idleRss,
      startRss,
      idleSettleS: IDLE_SETTLE_MS / 1000,
      guardrails,
      reproduce: `Reproduce: \`${command}\` (${took < 120 ? `${Math.round(took)} s` : `about ${Math.round(took / 60)} minutes`}).`,
    });
    const json = {
      date: new Date().toISOString(),
      command,
      machine,
      settings: {
        fixedPrompt: FIXED_PROMPT,
        retries: RETRIES,
        promptBytes: Number(env.BENCH_PROMPT_BYTES ?? 0),
        requestBytes: PLAIN_REQUEST.length,
        durationS: DURATION,
        settleS: SETTLE,
        warmupS: WARMUP,
        rounds: ROUNDS,
        concurrency: CONCURRENCY,
        kinds: KINDS,
        shapes: SHAPES,
        storages: STORAGE_LIST,
        held: HELD,
        gateway: GATEWAY_MODE,
        observe: OBSERVE,
        upstreamWrites: UPSTREAM_WRITES,
        profile: PROFILE || null,
        nodeFlags: NODE_FLAGS,
      },
      storages,
      peer: PEER ? { label: PEER_LABEL, skipped: peerSkipped, bodyCheck: peer?.bodyCheck ?? null } : null,
      cells: summaries,
      peakRssBytes: peakRss,
      heldStreams: HELD > 0 ? held : null,
      workers,
      idleRssBytes: idleRss,
      startRssBytes: startRss,
      redisCommands,
      responseCache: cache,
      guardrailEvents: guardrails,
      targets: checks,
      elapsedS: took,
    };
    writeFileSync(join(RESULTS, `${OUT}.json`), `${JSON.stringify(json, null, 2)}\n`);
    writeFileSync(join(RESULTS, `${OUT}.md`), md);
    // A dated copy of every "latest", so runs can be compared over time.
    if (OUT === 'latest') writeFileSync(join(RESULTS, `${json.date.slice(0, 16).replace(/:/g, '')}.md`), md);

    log('');
    log(md);
    for (const ch of checks) log(`${ch.status.toUpperCase().padEnd(9)}  ${ch.name}: ${ch.actual} (target ${ch.goal || 'n/a'})`);
    log(`\nwrote ${relative(ROOT, join(RESULTS, `${OUT}.json`))} and ${relative(ROOT, join(RESULTS, `${OUT}.md`))}`);

    if (PROFILE) {
      for (const name of [...measured.map((s) => `gateway-${s}`), ...(PROFILE === 'all' ? ['bare'] : [])]) {
        const file = mainThreadProfile(name);
        if (!file) {
          log(`\n(no main-thread profile in ${relative(ROOT, profDir(name))})`);
          continue;
        }
        const summary = formatSummary(await summarize(file));
        writeFileSync(join(RESULTS, `${OUT}-${name}-top.txt`), `${summary}\n`);
        log(`\n${name}: ${summary}`);
      }
    }
  } finally {
    await Promise.allSettled(children.map((c) => c.stop(3_000)));
    rmSync(tmp, { recursive: true, force: true });
    if (measured.includes('postgres')) await dropSchema(pgSchema).catch(() => {});
    if (measured.includes('redis')) {
      const c = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(c, redisPrefix).catch(() => {});
      c.disconnect();
    }
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
