/**
 * The soak: many mixed calls against a real node:http gateway, then the money and slot
 * invariants, on memory storage and on Redis storage.
 *
 *   npm run soak                       (node --expose-gc --import tsx bench/soak.ts)
 *
 * In one process: a lean OpenAI-compatible upstream on loopback (deterministic answers, no
 * request log), the gateway on node:http, and an undici client pool. The call mix:
 *
 *   plain        chat, 200 with usage
 *   stream       streamed chat, 200 ending in [DONE], no error event
 *   disconnect   streamed chat from a slow upstream; the client goes away after the first
 *                content chunk (the produced part is billed)
 *   upstream_err chat on a flaky upstream that answers 500 to every third call (502; 503 if
 *                its circuit ever opened)
 *   image        image on the built-in simulator (200)
 *   speech       speech on the simulator (200, audio bytes)
 *   video        video job on the simulator (202; 429 when the per-account in-flight cap of 8
 *                is full), tracked by the gateway to completion
 *
 * At the end: calls by kind and status, wallet delta vs ledger sum (must be equal: initial
 * balance - final balance == sum of ledger costs), open holds and held amount (0), active
 * leases (0), RSS after warm-up vs at the end, duration. Exits non-zero when an invariant
 * fails (RSS growth is reported, not judged: the memory stores keep the ledger in process).
 *
 * Environment (defaults in brackets):
 *   SOAK_CALLS [100000]         calls per storage
 *   SOAK_STORAGE [memory,redis] which storages, in order
 *   SOAK_CONCURRENCY [64]       calls in flight
 *   SOAK_MAX_SECONDS [900]      time bound per storage: no new call starts after it
 *   REDIS_URL [redis://127.0.0.1:6379]
 * Redis unreachable: skipped with a warning, unless CI=true (then it fails).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { Pool } from 'undici';
import { createGateway, type Gateway } from '../src/gateway.js';
import type { Logger } from '../src/observability/log.js';
import { createMemoryStores } from '../src/stores/memory/index.js';
import { createRedisStores } from '../src/stores/redis/entry.js';
import type { Stores } from '../src/stores/types.js';
import { deleteKeysWithPrefix, redisProblem } from './redis-util.js';

export type Kind = 'plain' | 'stream' | 'disconnect' | 'upstream_err' | 'image' | 'speech' | 'video';
export const KINDS: Kind[] = ['plain', 'stream', 'disconnect', 'upstream_err', 'image', 'speech', 'video'];

/** Relative weights of the call mix. */
export const DEFAULT_MIX: Record<Kind, number> = {
  plain: 36,
  stream: 28,
  disconnect: 10,
  upstream_err: 10,
  image: 8,
  speech: 6,
  video: 2,
};

/** The statuses each kind may answer; anything else is a problem. */
const EXPECTED: Record<Kind, number[]> = {
  plain: [200],
  stream: [200],
  disconnect: [200],
  upstream_err: [200, 502, 503],
  image: [200],
  speech: [200],
  video: [202, 429],
};

export interface SoakOptions {
  calls: number;
  storage: 'memory' | 'redis';
  redisUrl?: string;
  concurrency?: number;
  /** No new call starts after this long (the run is bounded in time). */
  maxMs?: number;
  mix?: Partial<Record<Kind, number>>;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

export interface KindStats {
  calls: number;
  byStatus: Record<string, number>;
}

export interface SoakReport {
  storage: 'memory' | 'redis';
  requestedCalls: number;
  calls: number;
  stoppedByTimeLimit: boolean;
  byKind: Record<Kind, KindStats>;
  initialBalance: bigint;
  finalBalance: bigint;
  walletDelta: bigint;
  ledgerSum: bigint;
  ledgerEntries: number;
  openHolds: number;
  held: bigint;
  activeLeases: { image: number; video: number };
  unfinishedJobs: number;
  logLines: { info: number; warn: number; error: number };
  rssWarmMb: number;
  rssEndMb: number;
  rssGrowthMb: number;
  heapWarmMb: number;
  heapEndMb: number;
  durationMs: number;
  /** Broken invariants and unexpected answers (empty when all is well). */
  problems: string[];
}

const ACCOUNT = 'acct_soak';
const WALLET_USD = 1_000_000;
const NANO_PER_USD = 1_000_000_000n;
const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const mb = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10;

function newKey(): string {
  let out = 'sk-mg-';
  while (out.length < 50) for (const b of randomBytes(64)) if (b < 248 && out.length < 50) out += BASE62[b % 62];
  return out;
}

// ---- a lean upstream ---------------------------------------------------------------------------

const CHUNKS = ['The', ' soak', ' keeps', ' going', ' and', ' going', ' and', ' going', '.'];
const SLOW_CHUNKS = Array.from({ length: 20 }, (_, i) => ` w${i}`);

interface LeanUpstream {
  url: string;
  close(): Promise<void>;
}

/** Deterministic OpenAI-compatible chat upstream; keeps no per-request state. */
async function startLeanUpstream(): Promise<LeanUpstream> {
  let flakyCount = 0;
  const sockets = new Set<Socket>();
  const event = (model: string, choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id: 'chatcmpl-soak', object: 'chat.completion.chunk', created: 1_700_000_000, model, choices, ...extra })}\n\n`;

  async function answer(req: IncomingMessage, res: ServerResponse, raw: string) {
    let body: { model?: string; stream?: boolean; stream_options?: { include_usage?: boolean } };
    try {
      body = JSON.parse(raw) as typeof body;
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"bad json","type":"invalid_request_error"}}');
      return;
    }
    const model = String(body.model);
    if (req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"no route","type":"invalid_request_error"}}');
      return;
    }
    if (model === 'soak-flaky-1' && ++flakyCount % 3 === 0) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"flaky upstream","type":"server_error"}}');
      return;
    }
    if (body.stream !== true) {
      const payload = JSON.stringify({
        id: 'chatcmpl-soak',
        object: 'chat.completion',
        created: 1_700_000_000,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: CHUNKS.join('') }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 },
      });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) });
      res.end(payload);
      return;
    }
    const slow = model === 'soak-slow-1';
    const chunks = slow ? SLOW_CHUNKS : CHUNKS;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write(event(model, [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]));
    for (const c of chunks) {
      if (slow) await sleep(5);
      if (res.destroyed) return;
      res.write(event(model, [{ index: 0, delta: { content: c }, finish_reason: null }]));
    }
    if (res.destroyed) return;
    res.write(event(model, [{ index: 0, delta: {}, finish_reason: 'stop' }]));
    if (body.stream_options?.include_usage === true) {
      res.write(event(model, [], { usage: { prompt_tokens: 12, completion_tokens: chunks.length, total_tokens: 12 + chunks.length } }));
    }
    res.end('data: [DONE]\n\n');
  }

  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (p: Buffer) => parts.push(p));
    req.on('end', () => {
      answer(req, res, Buffer.concat(parts).toString('utf8')).catch(() => res.destroy());
    });
    req.on('error', () => res.destroy());
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    async close() {
      const closing = new Promise<void>((r) => server.close(() => r()));
      for (const s of sockets) s.destroy();
      await closing;
    },
  };
}

// ---- the run -------------------------------------------------------------------------------------

function pickKind(mix: Record<Kind, number>, i: number): Kind {
  // A deterministic spread of the mix over the call index (golden-ratio sequence).
  const total = KINDS.reduce((s, k) => s + mix[k], 0);
  let x = ((i * 0.6180339887498949) % 1) * total;
  for (const k of KINDS) {
    x -= mix[k];
    if (x < 0) return k;
  }
  return 'plain';
}

export async function runSoak(opts: SoakOptions): Promise<SoakReport> {
  const log = opts.log ?? (() => {});
  const concurrency = opts.concurrency ?? 64;
  const maxMs = opts.maxMs ?? 15 * 60_000;
  const mix: Record<Kind, number> = { ...DEFAULT_MIX, ...(opts.mix ?? {}) };
  const problems: string[] = [];
  const problem = (p: string) => {
    if (problems.length < 50) problems.push(p);
  };

  const upstream = await startLeanUpstream();
  const prefix = `mgsoak:${randomUUID().slice(0, 8)}:`;
  const stores: Stores =
    opts.storage === 'redis'
      ? createRedisStores({ url: opts.redisUrl ?? 'redis://127.0.0.1:6379', keyPrefix: prefix, commandTimeoutMs: 5_000 })
      : // The invariant sums the whole ledger: keep every entry (the default keeps the newest 10,000).
        createMemoryStores({ ledgerLimit: Number.MAX_SAFE_INTEGER });
  const logLines = { info: 0, warn: 0, error: 0 };
  const errorSamples: string[] = [];
  const logger: Logger = {
    info: () => void logLines.info++,
    warn: () => void logLines.warn++,
    error: (e) => {
      logLines.error++;
      if (errorSamples.length < 5) errorSamples.push(JSON.stringify(e, (_k, v: unknown) => (v instanceof Error ? v.message : v)));
    },
  };
  const keys = [newKey(), newKey(), newKey(), newKey()];
  const textPricing = { prompt: '0.000001', completion: '0.000002' };
  const gateway: Gateway = createGateway({
    serviceName: 'soak',
    upstreams: {
      up: { baseUrl: upstream.url, apiKey: 'soak-upstream-key', timeoutMs: 30_000 },
      flaky: { baseUrl: upstream.url, apiKey: 'soak-upstream-key', timeoutMs: 30_000 },
      sim: { simulate: true, imageDelayMs: 0, videoDurationMs: 100, chunkDelayMs: 0 },
    },
    models: [
      { id: 'soak/chat', upstream: 'up', upstreamModel: 'soak-chat-1', pricing: textPricing, maxOutputTokens: 256 },
      { id: 'soak/slow', upstream: 'up', upstreamModel: 'soak-slow-1', pricing: textPricing, maxOutputTokens: 256 },
      { id: 'soak/flaky', upstream: 'flaky', upstreamModel: 'soak-flaky-1', pricing: textPricing, maxOutputTokens: 256 },
      { id: 'soak/image', type: 'image', upstream: 'sim', pricing: { unit: 'image', from: '0.01', tiers: { '480P': '0.01', '720P': '0.02' } } },
      { id: 'soak/speech', type: 'audio', upstream: 'sim', pricing: { unit: 'token', from: '0.000015', tiers: {} } },
      { id: 'soak/video', type: 'video', upstream: 'sim', pricing: { unit: 'second', from: '0.05', tiers: { '480P': '0.05', '720P': '0.1' } } },
    ],
    accounts: [{ id: ACCOUNT, walletUsd: WALLET_USD }],
    keys: keys.map((key, i) => ({ key, account: ACCOUNT, kind: 'developer' as const, label: `soak ${i}` })),
    limits: {
      keyRequestsPerMinute: 100_000_000,
      ipRequestsPerMinute: 100_000_000,
      inFlightImageJobs: 10_000,
      inFlightVideoJobs: 8,
      jobPollIntervalMs: 50,
    },
    stores,
    logger,
  });
  await gateway.ready;
  const initialBalance = (await stores.billing.wallet(ACCOUNT)).balance;
  if (initialBalance !== BigInt(WALLET_USD) * NANO_PER_USD) {
    problem(`initial balance ${initialBalance} is not the seeded ${WALLET_USD} USD (a reused Redis prefix?)`);
  }

  const server = createServer(gateway);
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const pool = new Pool(origin, { connections: concurrency, keepAliveTimeout: 60_000 });

  const byKind = Object.fromEntries(KINDS.map((k) => [k, { calls: 0, byStatus: {} as Record<string, number> }])) as Record<Kind, KindStats>;
  const count = (kind: Kind, status: string) => {
    byKind[kind].calls++;
    byKind[kind].byStatus[status] = (byKind[kind].byStatus[status] ?? 0) + 1;
    if (!EXPECTED[kind].includes(Number(status))) problem(`${kind}: unexpected ${status}`);
  };

  const chat = (model: string, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ model, messages: [{ role: 'user', content: 'Tell me about soaking.' }], max_tokens: 64, ...extra });

  async function one(i: number): Promise<void> {
    const kind = pickKind(mix, i);
    const key = keys[i % keys.length]!;
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const post = (path: string, body: string, signal?: AbortSignal) =>
      pool.request({ path: `/v1${path}`, method: 'POST', headers, body, ...(signal ? { signal } : {}) });
    try {
      switch (kind) {
        case 'plain':
        case 'upstream_err': {
          const res = await post('/chat/completions', chat(kind === 'plain' ? 'soak/chat' : 'soak/flaky'));
          const text = await res.body.text();
          if (res.statusCode === 200 && !text.includes('"choices"')) problem(`${kind}: 200 without choices`);
          return count(kind, String(res.statusCode));
        }
        case 'stream': {
          const res = await post('/chat/completions', chat('soak/chat', { stream: true, ...(i % 2 ? { stream_options: { include_usage: true } } : {}) }));
          const text = await res.body.text();
          if (res.statusCode === 200) {
            if (!text.endsWith('data: [DONE]\n\n')) problem('stream: did not end with [DONE]');
            if (text.includes('"finish_reason":"error"')) problem('stream: an error event from a healthy upstream');
          }
          return count(kind, String(res.statusCode));
        }
        case 'disconnect': {
          const ac = new AbortController();
          const res = await post('/chat/completions', chat('soak/slow', { stream: true }), ac.signal);
          count(kind, String(res.statusCode));
          try {
            for await (const chunk of res.body) {
              if ((chunk as Buffer).includes('"content":" w')) {
                ac.abort();
                break;
              }
            }
          } catch {
            // The abort itself.
          }
          res.body.destroy();
          return;
        }
        case 'image': {
          const res = await post('/images/generations', JSON.stringify({ model: 'soak/image', prompt: `soak ${i}`, size: '512x512' }));
          await res.body.text();
          return count(kind, String(res.statusCode));
        }
        case 'speech': {
          const res = await post('/audio/speech', JSON.stringify({ model: 'soak/speech', input: `Soak number ${i}.`, voice: 'alloy' }));
          await res.body.arrayBuffer();
          return count(kind, String(res.statusCode));
        }
        case 'video': {
          const res = await post('/videos', JSON.stringify({ model: 'soak/video', prompt: `soak ${i}`, seconds: 2, size: '640x480' }));
          await res.body.text();
          return count(kind, String(res.statusCode));
        }
      }
    } catch (err) {
      count(kind, `error:${(err as Error).name}`);
      problem(`${kind}: ${(err as Error).message}`);
    }
  }

  const memory = () => {
    (globalThis as { gc?: () => void }).gc?.();
    return process.memoryUsage();
  };
  const started = Date.now();
  const warmAt = Math.min(opts.calls, Math.max(200, Math.floor(opts.calls * 0.05)));
  let warm: NodeJS.MemoryUsage | undefined;
  let next = 0;
  let done = 0;
  let stoppedByTimeLimit = false;
  let lastReport = started;
  const worker = async () => {
    for (;;) {
      if (Date.now() - started > maxMs) {
        stoppedByTimeLimit = true;
        return;
      }
      const i = next++;
      if (i >= opts.calls) return;
      await one(i);
      done++;
      if (done === warmAt) warm = memory();
      if (Date.now() - lastReport > 5_000) {
        lastReport = Date.now();
        log(`  ${opts.storage}: ${done} / ${opts.calls} calls, rss ${mb(process.memoryUsage().rss)} MB`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));

  // Let the background work end: video jobs tracked to completion, settles and releases.
  const until = Date.now() + 60_000;
  let unfinishedJobs = (await stores.jobs.listUnfinished()).length;
  while (unfinishedJobs > 0 && Date.now() < until) {
    await sleep(100);
    unfinishedJobs = (await stores.jobs.listUnfinished()).length;
  }
  const settledUntil = Date.now() + 30_000;
  while (Date.now() < settledUntil) {
    const [holds, w, img, vid] = await Promise.all([
      stores.billing.openHolds(ACCOUNT),
      stores.billing.wallet(ACCOUNT),
      stores.limits.activeLeases(`image:${ACCOUNT}`),
      stores.limits.activeLeases(`video:${ACCOUNT}`),
    ]);
    if (holds === 0 && w.held === 0n && img === 0 && vid === 0) break;
    await sleep(100);
  }
  const durationMs = Date.now() - started;
  const end = memory();
  warm ??= end;

  const [wallet, ledger, openHolds, imageLeases, videoLeases] = await Promise.all([
    stores.billing.wallet(ACCOUNT),
    stores.billing.ledger(ACCOUNT),
    stores.billing.openHolds(ACCOUNT),
    stores.limits.activeLeases(`image:${ACCOUNT}`),
    stores.limits.activeLeases(`video:${ACCOUNT}`),
  ]);
  // The calls' charges: the ledger also holds the account's opening balance and any credits.
  const charges = ledger.filter((e) => e.units.kind !== 'credit');
  const ledgerSum = charges.reduce((s, e) => s + e.cost, 0n);
  const walletDelta = initialBalance - wallet.balance;
  if (walletDelta !== ledgerSum) problem(`wallet delta ${walletDelta} != ledger sum ${ledgerSum}`);
  // Every wallet change is a ledger entry: the balance is minus the sum of all of them.
  const allEntries = ledger.reduce((s, e) => s + e.cost, 0n);
  if (wallet.balance !== -allEntries) problem(`balance ${wallet.balance} != minus the ledger's sum ${-allEntries}`);
  if (openHolds !== 0) problem(`${openHolds} open holds`);
  if (wallet.held !== 0n) problem(`${wallet.held} nano-USD still held`);
  if (imageLeases !== 0 || videoLeases !== 0) problem(`active leases: image ${imageLeases}, video ${videoLeases}`);
  if (unfinishedJobs !== 0) problem(`${unfinishedJobs} jobs never finished`);
  if (logLines.error > 0) problem(`${logLines.error} error log lines, e.g. ${errorSamples.join(' | ')}`);
  if (wallet.balance < 0n) problem('negative balance');
  const calls = KINDS.reduce((s, k) => s + byKind[k].calls, 0);

  await pool.close();
  await new Promise<void>((r) => server.close(() => r()));
  server.closeAllConnections();
  await gateway.dispose();
  if (opts.storage === 'redis') {
    const redis = new Redis(opts.redisUrl ?? 'redis://127.0.0.1:6379');
    try {
      await deleteKeysWithPrefix(redis, prefix);
    } finally {
      redis.disconnect();
    }
  }
  await stores.close();
  await upstream.close();

  return {
    storage: opts.storage,
    requestedCalls: opts.calls,
    calls,
    stoppedByTimeLimit,
    byKind,
    initialBalance,
    finalBalance: wallet.balance,
    walletDelta,
    ledgerSum,
    ledgerEntries: charges.length,
    openHolds,
    held: wallet.held,
    activeLeases: { image: imageLeases, video: videoLeases },
    unfinishedJobs,
    logLines,
    rssWarmMb: mb(warm.rss),
    rssEndMb: mb(end.rss),
    rssGrowthMb: mb(end.rss - warm.rss),
    heapWarmMb: mb(warm.heapUsed),
    heapEndMb: mb(end.heapUsed),
    durationMs,
    problems,
  };
}

export function formatReport(r: SoakReport): string {
  const usd = (n: bigint) => `${n / NANO_PER_USD}.${String(n % NANO_PER_USD).padStart(9, '0')}`;
  const lines = [
    `soak on ${r.storage}: ${r.calls} calls in ${(r.durationMs / 1000).toFixed(1)} s (${Math.round(r.calls / (r.durationMs / 1000))} calls/s)` +
      (r.stoppedByTimeLimit ? ` -- stopped by the time limit before ${r.requestedCalls}` : ''),
    ...KINDS.map((k) => `  ${k.padEnd(13)} ${String(r.byKind[k].calls).padStart(7)}  ${JSON.stringify(r.byKind[k].byStatus)}`),
    `  wallet delta  ${usd(r.walletDelta)} USD (${r.walletDelta} nano)`,
    `  ledger sum    ${usd(r.ledgerSum)} USD (${r.ledgerSum} nano) over ${r.ledgerEntries} entries -> ${r.walletDelta === r.ledgerSum ? 'equal' : 'NOT EQUAL'}`,
    `  open holds    ${r.openHolds} (held ${r.held} nano)`,
    `  active leases image ${r.activeLeases.image}, video ${r.activeLeases.video}; unfinished jobs ${r.unfinishedJobs}`,
    `  log lines     info ${r.logLines.info}, warn ${r.logLines.warn}, error ${r.logLines.error}`,
    `  rss           ${r.rssWarmMb} MB after warm-up -> ${r.rssEndMb} MB at the end (growth ${r.rssGrowthMb} MB); heap ${r.heapWarmMb} -> ${r.heapEndMb} MB`,
    r.problems.length ? `  PROBLEMS:\n${r.problems.map((p) => `    - ${p}`).join('\n')}` : '  invariants: all hold',
  ];
  return lines.join('\n');
}

export { redisProblem } from './redis-util.js';

async function main(): Promise<void> {
  const env = process.env;
  const calls = Number(env.SOAK_CALLS ?? 100_000);
  const storages = (env.SOAK_STORAGE ?? 'memory,redis').split(',').map((s) => s.trim()) as Array<'memory' | 'redis'>;
  const concurrency = Number(env.SOAK_CONCURRENCY ?? 64);
  const maxMs = Number(env.SOAK_MAX_SECONDS ?? 900) * 1000;
  const redisUrl = env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  if (!(globalThis as { gc?: unknown }).gc) console.log('(run with --expose-gc for steadier RSS figures)');
  let failed = false;
  for (const storage of storages) {
    if (storage === 'redis') {
      const why = await redisProblem(redisUrl);
      if (why) {
        const msg = `Redis at ${redisUrl} is unreachable (${why})`;
        if (env.CI === 'true') {
          console.error(`soak on redis: FAILED: ${msg}`);
          failed = true;
        } else {
          console.warn(`\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n!! soak on redis SKIPPED: ${msg}\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n`);
        }
        continue;
      }
    }
    console.log(`soak on ${storage}: ${calls} calls, concurrency ${concurrency}, time bound ${maxMs / 1000} s`);
    const report = await runSoak({ calls, storage, redisUrl, concurrency, maxMs, log: (l) => console.log(l) });
    console.log(formatReport(report));
    if (report.problems.length) failed = true;
  }
  process.exitCode = failed ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
