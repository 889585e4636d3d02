/**
 * The chaos soak: mixed traffic from a few concurrent clients against gateway processes (the
 * CLI, `serve`) on SQLite, PostgreSQL or Redis, while the process is killed with SIGKILL and
 * restarted at random moments and the store is paused now and then; after each restart and at
 * the end, the books are audited and compared with what the clients received.
 *
 *   npm run soak                              (the soak, then this, long)
 *   CHAOS_ROUNDS=40 CHAOS_SEED=123 node --import tsx bench/chaos.ts
 *
 * The traffic (each client picks its next call with its own seeded generator):
 *   plain    chat, 200 with usage
 *   stream   streamed chat with include_usage, read to `data: [DONE]`
 *   cut      streamed chat from a slow upstream; the client goes away after the first content
 *   image    an image on the built-in simulator
 *   idem     plain chat with an Idempotency-Key, retried with the same key after any failure
 *            (across kills and restarts) until it answers 200, then sent once more to be replayed
 *
 * The chaos (from the conductor's seeded generator, so a seed replays the same schedule; the
 * exact interleaving with the processes still depends on timing):
 *   - each round, the gateway is killed with SIGKILL at a random moment, then restarted on the
 *     same store and the same settle journal folder;
 *   - in some rounds, the store is paused for a moment: PostgreSQL and Redis through a TCP
 *     fault proxy (`hang`: the open connections drop, new ones get no answer, then `pass`);
 *     SQLite by holding the file's write lock from another connection, as another process
 *     (the CLI topping up a wallet) would.
 *
 * The checks (after each restart, with the clients held back, and at the end):
 *   - the audit (`model-gateway audit --config F`) exits 0;
 *   - every answer a client received whole (a 200 body; a stream up to [DONE]) and that was no
 *     replay has exactly one charge with its request id (x-request-id), with the units and the
 *     cost its usage implies; a replay has none of its own and the first answer's body;
 *   - no request id has two charges; cut streams and calls that died are charged at most once;
 *   - charges under request ids no client saw are at most the calls that got no answer head;
 *   - per Idempotency-Key, at most one answer that was not a replay;
 *   - the wallet's balance is minus the sum of the ledger.
 * A settle the killed process kept in its journal lands once the restarted process takes the
 * journal over (its owner's lock is stale after 10 s), so the checks wait for the journal to
 * be empty first.
 *
 * Environment (bench only; defaults in brackets):
 *   CHAOS_DRIVERS [sqlite,postgres,redis]   CHAOS_ROUNDS [30]   CHAOS_CLIENTS [6]
 *   CHAOS_SEED [random]   POSTGRES_URL, REDIS_URL
 * PostgreSQL or Redis unreachable: that driver is skipped with a warning, unless CI=true
 * (then it fails).
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { costOf, formatUsd, parsePrice } from '../src/billing/money.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../test/admin/token.js';
import { startFaultProxy, type FaultProxy } from '../test/helpers/fault-proxy.js';
import { COMPLETION_PRICE, MODEL, PROMPT_PRICE, testKey } from '../test/helpers/gateway.js';
import { IMAGE, imageCost, mediaModels } from '../test/helpers/media.js';
import { runCli, startGatewayProcess, writeConfig, type GatewayProcess } from '../test/helpers/processes.js';
import { startTestUpstream, type TestUpstream } from '../test/helpers/upstream.js';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from './postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from './redis-util.js';

export type Driver = 'sqlite' | 'postgres' | 'redis';
export const DRIVERS: Driver[] = ['sqlite', 'postgres', 'redis'];
export type Kind = 'plain' | 'stream' | 'cut' | 'image' | 'idem';
const KINDS: Kind[] = ['plain', 'stream', 'cut', 'image', 'idem'];
/** Relative weights of the call mix. */
const MIX: Record<Kind, number> = { plain: 30, stream: 30, cut: 12, image: 8, idem: 20 };

export interface ChaosOptions {
  driver: Driver;
  seed: number;
  /** Kills (and restarts) of the gateway. */
  rounds: number;
  /** Concurrent clients. */
  clients: number;
  /** How long the traffic runs before each kill, ms: a random time in [min, max). */
  roundMs?: [number, number];
  /** Share of rounds with a store pause, and its length, ms. */
  pauseChance?: number;
  pauseMs?: [number, number];
  log?: (line: string) => void;
}

export interface ChaosReport {
  driver: Driver;
  seed: number;
  rounds: number;
  /** Calls by kind, and by outcome: a status, `error` (no answer head), `whole`, `replayed`. */
  calls: Record<Kind, Record<string, number>>;
  /** Answers received whole (replays included). */
  whole: number;
  /** Charges in the ledger at the last check. */
  charges: number;
  pauses: number;
  audits: number;
  /** Waits for a journaled settle to land, and how long they took together, ms. */
  journalWaits: number;
  journalWaitMs: number;
  durationMs: number;
  /** Broken checks and unexpected answers (empty when all is well). */
  problems: string[];
}

/** Seeded generator (mulberry32): a printed seed replays the same choices. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const between = (r: () => number, [min, max]: [number, number]) => Math.floor(min + r() * (max - min));

const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
const STREAM_CHUNKS = ['Hel', 'lo', ' there'];
const STREAM_USAGE = { prompt_tokens: 11, completion_tokens: STREAM_CHUNKS.length };
const CUT_CHUNKS = Array.from({ length: 10 }, (_, i) => ` w${i}`);
/** The simulator's 1024x1024 image is priced at the 1080P tier. */
const IMAGE_SIZE = '1024x1024';
const IMAGE_TIER = '1080P';
const WALLET_USD = 1_000;
/** What the ledger entry of a call must say. */
interface Expected {
  model: string;
  units: Record<string, unknown>;
  cost: bigint;
}

const chatCost = (u: { prompt_tokens: number; completion_tokens: number }) =>
  costOf([
    [parsePrice(PROMPT_PRICE), u.prompt_tokens],
    [parsePrice(COMPLETION_PRICE), u.completion_tokens],
  ]);

/** One attempt of a call, as its client saw it. */
export interface Attempt {
  kind: Kind;
  /** The x-request-id of the answer head; null when none arrived (the process died first). */
  requestId: string | null;
  status: number | null;
  /** The client holds the whole answer: a 200 body, or a stream up to [DONE]. */
  whole: boolean;
  replayed: boolean;
  idemKey?: string;
  body?: string;
  /** The round it started in (1 before the first kill), and when, ms since the round began. */
  round: number;
  at: number;
  /** For a whole answer: what its charge must be (from the usage the client received). */
  expected?: Expected;
}

interface LedgerEntry {
  id: string;
  model: string | null;
  units: Record<string, unknown> & { kind: string };
  costUsd: string;
}

/** The store of one driver: the config of its processes, its pause, and its cleanup. */
interface Store {
  storage: Record<string, unknown>;
  /** For the audit: the store without the fault proxy. */
  direct: Record<string, unknown>;
  pause(ms: number): Promise<void>;
  cleanup(): Promise<void>;
}

function proxied(url: string, proxy: FaultProxy): string {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  return u.toString();
}

async function openStore(driver: Driver, dir: string): Promise<Store> {
  if (driver === 'sqlite') {
    const path = join(dir, 'books.db');
    const storage = { driver: 'sqlite', path };
    let lock: Database.Database | null = null;
    return {
      storage,
      direct: storage,
      async pause(ms) {
        // The file's write lock, held by another connection: the gateway's writes wait for it
        // (or give up after their busy timeout), as they would behind another process.
        lock ??= new Database(path, { timeout: 5_000 });
        lock.exec('BEGIN IMMEDIATE');
        try {
          await sleep(ms);
        } finally {
          lock.exec('ROLLBACK');
        }
      },
      async cleanup() {
        lock?.close();
      },
    };
  }
  const url = driver === 'postgres' ? POSTGRES_URL : REDIS_URL;
  const u = new URL(url);
  const proxy = await startFaultProxy(`http://${u.hostname}:${u.port || (driver === 'postgres' ? 5432 : 6379)}`);
  const pause = async (ms: number) => {
    // The open connections drop and new ones get no answer until `pass`.
    await proxy.setMode({ kind: 'hang' });
    try {
      await sleep(ms);
    } finally {
      await proxy.setMode({ kind: 'pass' });
    }
  };
  if (driver === 'postgres') {
    const schema = freshSchema('mgchaos');
    return {
      storage: { driver: 'postgres', url: proxied(url, proxy), schema },
      direct: { driver: 'postgres', url, schema },
      pause,
      async cleanup() {
        await proxy.close();
        await dropSchema(schema);
      },
    };
  }
  const keyPrefix = `mgchaos:${freshSchema('r')}:`;
  return {
    storage: { driver: 'redis', url: proxied(url, proxy), keyPrefix },
    direct: { driver: 'redis', url, keyPrefix },
    pause,
    async cleanup() {
      await proxy.close();
      const c = new Redis(url);
      try {
        await deleteKeysWithPrefix(c, keyPrefix);
      } finally {
        c.disconnect();
      }
    },
  };
}

/** Whether a settle journal folder still holds a settle that has not landed. */
function journalHolds(dir: string): boolean {
  if (!existsSync(dir)) return false;
  return readdirSync(dir).some((name) => {
    if (!name.endsWith('.jsonl')) return false;
    const file = join(dir, name);
    try {
      return statSync(file).isFile() && readFileSync(file, 'utf8').trim() !== '';
    } catch {
      return false; // renamed under us by a takeover
    }
  });
}

/** The upstream's answer to a call is chosen by what the call asks: its kind is in the message. */
function scriptUpstream(up: TestUpstream, seed: number): void {
  const r = rng(seed ^ 0x5eed);
  up.setBehavior((rec) => {
    const content = (rec.body?.messages as Array<{ content?: unknown }> | undefined)?.[0]?.content;
    const text = typeof content === 'string' ? content : '';
    if (rec.body?.stream === true) {
      return text.startsWith('cut')
        ? { kind: 'stream', chunks: CUT_CHUNKS, delayMs: 25 }
        : { kind: 'stream', chunks: STREAM_CHUNKS, delayMs: between(r, [0, 15]), usageCounts: STREAM_USAGE };
    }
    // A plain answer a little late now and then, so kills also land while one is on its way.
    return { kind: 'json', content: 'Hello there', usage: USAGE, gate: sleep(between(r, [0, 20])) };
  });
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = opts.log ?? (() => {});
  const started = Date.now();
  const problems: string[] = [];
  const problem = (p: string) => {
    if (problems.length < 50) problems.push(p);
  };
  // Each driver has its own schedule from the one seed.
  const conductor = rng(opts.seed + 1_000 * DRIVERS.indexOf(opts.driver));
  const roundMs = opts.roundMs ?? [300, 1_500];
  const pauseMs = opts.pauseMs ?? [100, 700];
  const pauseChance = opts.pauseChance ?? 0.5;

  const dir = mkdtempSync(join(tmpdir(), `mg-chaos-${opts.driver}-`));
  const journal = join(dir, 'journal');
  const store = await openStore(opts.driver, dir);
  const upstream = await startTestUpstream();
  scriptUpstream(upstream, opts.seed);

  const account = `acct_chaos_${opts.driver}`;
  const keys = Array.from({ length: opts.clients }, () => testKey());
  const config = (storage: Record<string, unknown>) => ({
    upstreams: {
      test: { baseUrl: upstream.url, apiKey: 'upstream-key-chaos', timeoutMs: 20_000 },
      sim: { simulate: true, imageDelayMs: 0, videoDurationMs: 0, chunkDelayMs: 0 },
    },
    models: [{ id: MODEL, upstream: 'test', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE } }, ...mediaModels('sim')],
    accounts: [{ id: account, walletUsd: WALLET_USD }],
    keys: keys.map((key) => ({ key, account })),
    // A killed process's Idempotency-Key markers lapse after this, so a retry can run.
    limits: { keyRequestsPerMinute: 1_000_000, ipRequestsPerMinute: 1_000_000, idempotencyLockTtlMs: 3_000 },
    admin: { tokenSha256: ADMIN_SHA },
    settleJournalDir: journal,
    storage,
  });
  const serveConfig = writeConfig(config(store.storage));
  const auditConfig = writeConfig(config(store.direct));

  const attempts: Attempt[] = [];
  const calls = Object.fromEntries(KINDS.map((k) => [k, {} as Record<string, number>])) as Record<Kind, Record<string, number>>;
  const count = (kind: Kind, outcome: string) => void (calls[kind][outcome] = (calls[kind][outcome] ?? 0) + 1);
  let pauses = 0;
  let round = 1;
  let roundStart = Date.now();
  let audits = 0;
  let journalWaits = 0;
  let journalWaitMs = 0;
  let ledgerCharges = 0;

  // The gateway, and the gate the clients pass before each call: closed from a kill until the
  // restarted process was audited, so the audit reads books no client is changing.
  let gateway: GatewayProcess | null = null;
  let open!: () => void;
  let gate = Promise.resolve();
  const closeGate = () => void (gate = new Promise<void>((r) => (open = r)));
  let stopping = false;
  let inFlight = 0;
  let idle: (() => void) | null = null;

  const start = async () => {
    gateway = await startGatewayProcess(serveConfig);
  };
  const origin = () => gateway!.baseURL.replace(/\/v1$/, '');

  /** One HTTP attempt of a call; never throws. */
  async function attempt(kind: Kind, key: string, path: string, body: unknown, idemKey?: string): Promise<Attempt> {
    await gate;
    inFlight++;
    const a: Attempt = { kind, requestId: null, status: null, whole: false, replayed: false, round, at: Date.now() - roundStart, ...(idemKey ? { idemKey } : {}) };
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 20_000);
    try {
      const res = await fetch(`${gateway!.baseURL}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(idemKey ? { 'idempotency-key': idemKey } : {}) },
        body: JSON.stringify(body),
        signal: ac.signal,
      });
      a.status = res.status;
      a.requestId = res.headers.get('x-request-id');
      a.replayed = res.headers.get('idempotent-replayed') === 'true';
      if (res.status !== 200) {
        await res.text().catch(() => '');
        return a;
      }
      if (kind === 'cut') {
        // Away after the first content chunk.
        const reader = res.body!.getReader();
        const decoder = new TextDecoder();
        let text = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (value) text += decoder.decode(value, { stream: true });
          if (done || text.includes('"content":" w')) break;
        }
        ac.abort();
        await reader.cancel().catch(() => undefined);
        return a;
      }
      const text = await res.text();
      a.body = text;
      a.whole = true;
      if (kind === 'stream') {
        if (!text.endsWith('data: [DONE]\n\n')) {
          // A stream that ended without [DONE] (the process died under it) is not whole.
          a.whole = false;
          return a;
        }
        if (text.includes('"finish_reason":"error"')) problem(`${opts.driver} stream ${a.requestId}: an error event from a healthy upstream`);
        const usage = text
          .split('\n')
          .filter((l) => l.startsWith('data: {'))
          .map((l) => JSON.parse(l.slice(6)) as { usage?: typeof USAGE })
          .find((c) => c.usage)?.usage;
        if (!usage) problem(`${opts.driver} stream ${a.requestId}: no usage chunk`);
        else a.expected = { model: MODEL, units: { kind: 'tokens', prompt: usage.prompt_tokens, completion: usage.completion_tokens }, cost: chatCost(usage) };
      } else if (kind === 'image') {
        const parsed = JSON.parse(text) as { data?: unknown[] };
        if (parsed.data?.length !== 1) problem(`${opts.driver} image ${a.requestId}: ${text.slice(0, 200)}`);
        a.expected = { model: IMAGE, units: { kind: 'images', images: 1, tier: IMAGE_TIER }, cost: imageCost(IMAGE_TIER) };
      } else {
        const parsed = JSON.parse(text) as { usage?: typeof USAGE };
        if (!parsed.usage) problem(`${opts.driver} ${kind} ${a.requestId}: no usage in ${text.slice(0, 200)}`);
        else a.expected = { model: MODEL, units: { kind: 'tokens', prompt: parsed.usage.prompt_tokens, completion: parsed.usage.completion_tokens }, cost: chatCost(parsed.usage) };
      }
      return a;
    } catch {
      // The process died under the call (or the cut's own abort): no whole answer.
      return a;
    } finally {
      clearTimeout(timer);
      attempts.push(a);
      count(kind, a.whole ? (a.replayed ? 'replayed' : 'whole') : a.status === null ? 'error' : String(a.status));
      // A status no chaos explains is a finding: 503 is a paused store, 409 an
      // Idempotency-Key whose first call is still in flight (or its dead process's marker).
      if (a.status !== null && a.status !== 200 && a.status !== 503 && !(kind === 'idem' && a.status === 409)) {
        problem(`${opts.driver} ${kind} ${a.requestId}: unexpected ${a.status}`);
      }
      if (--inFlight === 0) idle?.();
    }
  }

  async function client(index: number): Promise<void> {
    const r = rng(opts.seed + 1_000 * DRIVERS.indexOf(opts.driver) + 1 + index);
    const key = keys[index]!;
    const total = KINDS.reduce((s, k) => s + MIX[k], 0);
    for (let seq = 0; !stopping; seq++) {
      let x = r() * total;
      const kind = KINDS.find((k) => (x -= MIX[k]) < 0) ?? 'plain';
      const tag = `${kind} ${index}.${seq}`;
      const chat = (extra: Record<string, unknown> = {}) => ({ model: MODEL, messages: [{ role: 'user', content: tag }], max_tokens: 50, ...extra });
      switch (kind) {
        case 'plain':
          await attempt(kind, key, '/chat/completions', chat());
          break;
        case 'stream':
          await attempt(kind, key, '/chat/completions', chat({ stream: true, stream_options: { include_usage: true } }));
          break;
        case 'cut':
          await attempt(kind, key, '/chat/completions', chat({ stream: true }));
          break;
        case 'image':
          await attempt(kind, key, '/images/generations', { model: IMAGE, prompt: tag, size: IMAGE_SIZE });
          break;
        case 'idem': {
          // Retried with the same key until it answers 200 (across kills and restarts), then
          // sent once more, which must be a replay. At the end the retries stop.
          const idemKey = `chaos-${opts.driver}-${opts.seed}-${index}-${seq}`;
          const body = chat();
          let answered = 0;
          while (answered < 2 && !stopping) {
            const a = await attempt(kind, key, '/chat/completions', body, idemKey);
            if (a.whole) answered++;
            else await sleep(between(r, [50, 250]));
          }
          break;
        }
      }
    }
  }

  async function quiesce(): Promise<void> {
    if (inFlight > 0) await new Promise<void>((r) => (idle = r));
    idle = null;
  }

  async function ledger(): Promise<LedgerEntry[]> {
    const out: LedgerEntry[] = [];
    let cursor = '';
    for (;;) {
      const res = await fetch(`${origin()}/admin/v1/ledger?account=${account}&limit=1000${cursor ? `&cursor=${cursor}` : ''}`, {
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      if (res.status !== 200) throw new Error(`admin ledger answered ${res.status}: ${await res.text()}`);
      const page = (await res.json()) as { data: LedgerEntry[]; nextCursor: string; more: boolean };
      out.push(...page.data);
      if (!page.more) return out;
      cursor = page.nextCursor;
    }
  }

  async function balance(): Promise<bigint> {
    const res = await fetch(`${origin()}/admin/v1/accounts/${account}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const body = (await res.json()) as { balanceUsd?: string; wallet?: { balanceUsd?: string } };
    const usd = body.balanceUsd ?? body.wallet?.balanceUsd;
    if (usd === undefined) throw new Error(`no balance in ${JSON.stringify(body)}`);
    return usdToNano(usd);
  }

  /** The audit and the books against what the clients received; `when` names the moment. */
  async function check(when: string, final: boolean): Promise<void> {
    // A settle the killed process journaled lands once the new process takes the journal over.
    const t0 = Date.now();
    if (journalHolds(journal)) {
      journalWaits++;
      while (journalHolds(journal) && Date.now() - t0 < 30_000) await sleep(100);
      journalWaitMs += Date.now() - t0;
      if (journalHolds(journal)) problem(`${when}: the settle journal still holds settles after 30 s`);
    }
    // After a restart the restarted process audits its store (auditBooks, GET /admin/v1/audit);
    // at the end the CLI does, as an operator's cron job would (a process of its own).
    audits++;
    if (final) {
      const audit = await runCli(['audit', '--config', auditConfig]);
      if (audit.code !== 0) problem(`${when}: the audit CLI exited ${audit.code}: ${audit.stdout}${audit.stderr}`);
    } else {
      const res = await fetch(`${origin()}/admin/v1/audit`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      const text = await res.text();
      if (res.status !== 200 || !(JSON.parse(text) as { ok?: unknown }).ok) problem(`${when}: the audit answered ${res.status}: ${text}`);
    }

    const entries = await ledger();
    const charges = new Map<string, LedgerEntry[]>();
    let sum = 0n;
    for (const e of entries) {
      sum += usdToNano(e.costUsd);
      if (e.units.kind === 'credit') continue;
      charges.set(e.id, [...(charges.get(e.id) ?? []), e]);
    }
    ledgerCharges = charges.size;
    const bal = await balance();
    if (bal !== -sum) problem(`${when}: balance ${formatUsd(bal)} != minus the ledger's sum ${formatUsd(-sum)}`);
    for (const [id, list] of charges) if (list.length > 1) problem(`${when}: request ${id} has ${list.length} charges`);

    const seen = new Set<string>();
    const firstBody = new Map<string, string>();
    const originals = new Map<string, number>();
    for (const a of attempts) {
      if (a.requestId === null) continue;
      seen.add(a.requestId);
      const found = charges.get(a.requestId) ?? [];
      if (!a.whole) continue;
      if (a.replayed) {
        if (found.length !== 0) problem(`${when}: replay ${a.requestId} was charged`);
        const first = firstBody.get(a.idemKey ?? '');
        if (first !== undefined && first !== a.body) problem(`${when}: replay ${a.requestId} of ${a.idemKey} has another body than the first answer`);
        continue;
      }
      if (a.idemKey !== undefined) {
        originals.set(a.idemKey, (originals.get(a.idemKey) ?? 0) + 1);
        if (a.body !== undefined) firstBody.set(a.idemKey, a.body);
      }
      if (found.length !== 1) {
        problem(`${when}: ${a.kind} ${a.requestId} was answered whole and has ${found.length} charges`);
        continue;
      }
      const e = found[0]!;
      const x = a.expected;
      if (!x) continue;
      const units = Object.fromEntries(Object.keys(x.units).map((k) => [k, e.units[k]]));
      if (e.model !== x.model || JSON.stringify(units) !== JSON.stringify(x.units) || usdToNano(e.costUsd) !== x.cost) {
        problem(`${when}: ${a.kind} ${a.requestId} charged ${e.model} ${JSON.stringify(e.units)} ${e.costUsd}, expected ${x.model} ${JSON.stringify(x.units)} ${formatUsd(x.cost)}`);
      }
    }
    for (const [k, n] of originals) {
      if (n > 1 && !lostToACrash(attempts.filter((a) => a.idemKey === k))) problem(`${when}: Idempotency-Key ${k} answered ${n} times without a replay: ${describe(attempts.filter((a) => a.idemKey === k))}`);
    }
    // A charge under an id no client saw belongs to a call whose answer head never arrived.
    const unseen = [...charges.keys()].filter((id) => !seen.has(id)).length;
    const headless = attempts.filter((a) => a.requestId === null).length;
    if (unseen > headless) problem(`${when}: ${unseen} charges under request ids no client saw, but only ${headless} calls got no answer head`);
  }

  try {
    await start();
    const clients = Array.from({ length: opts.clients }, (_, i) => client(i));
    for (; round <= opts.rounds; round++) {
      roundStart = Date.now();
      const killAt = between(conductor, roundMs);
      const pauseAt = conductor() < pauseChance ? between(conductor, [0, killAt]) : null;
      const pauseFor = between(conductor, pauseMs);
      log(`  ${opts.driver} round ${round}: kill at ${killAt} ms${pauseAt === null ? '' : `, store paused at ${pauseAt} ms for ${pauseFor} ms`}`);
      let paused: Promise<void> = Promise.resolve();
      const pauseTimer =
        pauseAt === null
          ? undefined
          : setTimeout(() => {
              pauses++;
              paused = store.pause(pauseFor);
            }, pauseAt);
      await sleep(killAt);
      closeGate();
      await gateway!.kill('SIGKILL');
      clearTimeout(pauseTimer);
      await paused;
      await quiesce();
      await start();
      await check(`${opts.driver} after restart ${round}`, false);
      roundStart = Date.now();
      open();
    }
    stopping = true;
    await Promise.all(clients);
    await check(`${opts.driver} at the end`, true);
  } catch (err) {
    problem(`${opts.driver} round ${round}: ${(err as Error).stack ?? String(err)}\n${(gateway as GatewayProcess | null)?.output().slice(-2_000) ?? ''}`);
  } finally {
    stopping = true;
    open?.();
    await (gateway as GatewayProcess | null)?.kill('SIGKILL');
    await upstream.close();
    await store.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }

  return {
    driver: opts.driver,
    seed: opts.seed,
    rounds: opts.rounds,
    calls,
    whole: attempts.filter((a) => a.whole).length,
    charges: ledgerCharges,
    pauses,
    audits,
    journalWaits,
    journalWaitMs,
    durationMs: Date.now() - started,
    problems,
  };
}

/** Attempts for a failure message: where each happened and what it got. */
/**
 * The one way an Idempotency-Key may run twice, as documented: its answer went out whole while
 * the store could not keep it (the key then stays in flight, so a retry gets 409 while the save
 * is tried again), and the instance was killed before the save landed (a killed instance's
 * in-flight marker lapses within its TTL, and nothing of the answer survives it). Each run is
 * then a call of its own, charged once (checked above). A kept answer replays to every later
 * attempt (the stores are durable), so a run after a kill with no replay between says the
 * save had not landed; a 409 between may say so too, but only if a retry happened to come.
 * A second run in the same round, or after a replay, is a problem.
 */
export function lostToACrash(list: Attempt[]): boolean {
  const before = (a: Attempt, b: Attempt) => a.round < b.round || (a.round === b.round && a.at < b.at);
  const runs = list.filter((a) => a.whole && !a.replayed).sort((a, b) => (before(a, b) ? -1 : 1));
  for (let i = 1; i < runs.length; i++) {
    const first = runs[i - 1]!;
    const next = runs[i]!;
    const killed = next.round > first.round;
    // A replay in between says the answer was kept after all.
    const unkept = !list.some((a) => a.replayed && before(first, a) && before(a, next));
    if (!killed || !unkept) return false;
  }
  return true;
}

function describe(list: Attempt[]): string {
  return list
    .map((a) => `[round ${a.round} +${a.at} ms: ${a.status ?? 'no answer'}${a.whole ? ' whole' : ''}${a.replayed ? ' replayed' : ''} ${a.requestId ?? ''}]`)
    .join(' ');
}

function usdToNano(usd: string): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{1,9}))?$/.exec(usd);
  if (!m) throw new RangeError(`not a USD amount: ${usd}`);
  const nano = BigInt(m[2]!) * 1_000_000_000n + BigInt((m[3] ?? '').padEnd(9, '0'));
  return m[1] ? -nano : nano;
}

export function formatChaos(r: ChaosReport): string {
  const lines = [
    `chaos on ${r.driver} (seed ${r.seed}): ${r.rounds} kills, ${r.pauses} store pauses, ${r.audits} audits in ${(r.durationMs / 1000).toFixed(1)} s`,
    ...KINDS.map((k) => `  ${k.padEnd(7)} ${JSON.stringify(r.calls[k])}`),
    `  whole answers ${r.whole}, charges ${r.charges}; journal waits ${r.journalWaits} (${r.journalWaitMs} ms)`,
    r.problems.length ? `  PROBLEMS:\n${r.problems.map((p) => `    - ${p}`).join('\n')}` : '  checks: all hold',
  ];
  return lines.join('\n');
}

/** Why `driver`'s store cannot be used, or null. */
export async function driverProblem(driver: Driver): Promise<string | null> {
  if (driver === 'postgres') return postgresProblem(POSTGRES_URL);
  if (driver === 'redis') return redisProblem(REDIS_URL);
  return null;
}

async function main(): Promise<void> {
  const env = process.env;
  const drivers = (env.CHAOS_DRIVERS ?? DRIVERS.join(',')).split(',').map((s) => s.trim()) as Driver[];
  const rounds = Number(env.CHAOS_ROUNDS ?? 30);
  const clients = Number(env.CHAOS_CLIENTS ?? 6);
  const seed = env.CHAOS_SEED ? Number(env.CHAOS_SEED) : Math.floor(Math.random() * 2 ** 31);
  console.log(`chaos: seed ${seed} (replay with CHAOS_SEED=${seed}), ${rounds} kills per driver, ${clients} clients`);
  let failed = false;
  const runs = drivers.map(async (driver) => {
    const why = await driverProblem(driver);
    if (why) {
      if (env.CI === 'true') {
        console.error(`chaos on ${driver}: FAILED: its store is unreachable (${why})`);
        failed = true;
      } else {
        console.warn(`\n!! chaos on ${driver} SKIPPED: its store is unreachable (${why}); under CI=true this fails\n`);
      }
      return;
    }
    const report = await runChaos({ driver, seed, rounds, clients, log: (l) => console.log(l) });
    console.log(formatChaos(report));
    if (report.problems.length) failed = true;
  });
  await Promise.all(runs);
  process.exitCode = failed ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
