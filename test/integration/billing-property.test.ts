/**
 * The ledger's invariant under random traffic (fast-check): random sequences of calls of every
 * billed kind (plain and streamed chat, speech, images, videos), run concurrently, with random
 * client disconnects and upstream failures, and operators' top-ups and credits among them, on
 * memory and on Redis. Once every call ended:
 *
 *   charges' sum == wallet debits == /key usage, and no hold is left open;
 *   for every account, balance == -(sum of all its ledger entries' costs).
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { formatUsd } from '../../src/billing/money.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import { eventually, MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { AUDIO, IMAGE, mediaModels, VIDEO } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { type Behavior, startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const redisUp = (await redisProblem(REDIS_URL)) === null;
if (!redisUp && process.env.CI !== 'true') {
  console.warn(`\n!!! SKIPPING the Redis half of the billing property test: Redis at ${REDIS_URL} is unreachable (under CI=true this fails).\n`);
}
const PREFIX = `mgbp:${randomBytes(4).toString('hex')}:`;
const WALLET_USD = 50;

type Op =
  | { kind: 'chat'; outcome: 'usage' | 'no_usage' | 'upstream_500' | 'client_gone' }
  | { kind: 'stream'; outcome: 'usage' | 'no_usage' | 'reset' | 'client_gone'; chunks: number }
  | { kind: 'speech' }
  | { kind: 'image'; fail: boolean; n: number }
  | { kind: 'video'; fail: boolean; seconds: number }
  /** An operator's wallet change: a top-up, or a signed credit (an adjustment when negative). */
  | { kind: 'topup'; cents: number }
  | { kind: 'credit'; cents: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('chat' as const), outcome: fc.constantFrom('usage' as const, 'no_usage' as const, 'upstream_500' as const, 'client_gone' as const) }),
  fc.record({
    kind: fc.constant('stream' as const),
    outcome: fc.constantFrom('usage' as const, 'no_usage' as const, 'reset' as const, 'client_gone' as const),
    chunks: fc.integer({ min: 1, max: 6 }),
  }),
  fc.record({ kind: fc.constant('speech' as const) }),
  fc.record({ kind: fc.constant('image' as const), fail: fc.boolean(), n: fc.integer({ min: 1, max: 3 }) }),
  fc.record({ kind: fc.constant('video' as const), fail: fc.boolean(), seconds: fc.integer({ min: 1, max: 8 }) }),
  fc.record({ kind: fc.constant('topup' as const), cents: fc.integer({ min: 1, max: 500 }) }),
  fc.record({ kind: fc.constant('credit' as const), cents: fc.integer({ min: -300, max: 300 }).filter((c) => c !== 0) }),
);

const cents = (c: number) => BigInt(c) * 10_000_000n;

/** The test upstream's answer for a chat request: the scenario travels in the prompt. */
function chatBehavior(rec: { body?: Record<string, unknown> }): Behavior {
  const content = ((rec.body?.messages as Array<{ content: string }> | undefined)?.[0]?.content ?? '{}') as string;
  const op = JSON.parse(content) as Op;
  if (op.kind === 'chat') {
    if (op.outcome === 'upstream_500') return { kind: 'error', status: 500, message: 'boom' };
    if (op.outcome === 'client_gone') {
      return {
        kind: 'custom',
        handle(_req, res) {
          // Answers late: the client has gone by then.
          setTimeout(() => {
            if (!res.destroyed) res.end(JSON.stringify({ id: 'x', object: 'chat.completion', choices: [] }));
          }, 400).unref();
        },
      };
    }
    return { kind: 'json', content: 'an answer of several words', usage: op.outcome === 'usage' ? { prompt_tokens: 17, completion_tokens: 9 } : null };
  }
  if (op.kind === 'stream') {
    const chunks = Array.from({ length: op.chunks }, (_, i) => `piece ${i} `);
    if (op.outcome === 'reset') return { kind: 'stream', chunks, resetAfter: Math.max(1, op.chunks - 1), usage: false };
    if (op.outcome === 'client_gone') return { kind: 'stream', chunks: [...chunks, ...chunks], delayMs: 40 };
    return { kind: 'stream', chunks, usage: op.outcome === 'usage' };
  }
  return { kind: 'error', status: 400, message: 'unexpected' };
}

const storages: Array<[string, boolean, () => Stores]> = [
  ['memory', true, () => createMemoryStores()],
  ['redis', redisUp || process.env.CI === 'true', () => createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX })],
];

describe.each(storages)('%s: ledger invariant under random traffic', (name, enabled, makeStores) => {
  let up: TestUpstream;
  let media: MediaUpstream;
  let gw: RunningGateway;
  let runs = 0;

  beforeAll(async () => {
    if (!enabled) return;
    up = await startTestUpstream();
    up.setBehavior(chatBehavior);
    media = await startMediaUpstream();
    const { options } = testConfig({ upstreamUrl: up.url, limits: { jobPollIntervalMs: 50, inFlightImageJobs: 50, inFlightVideoJobs: 50 } });
    options.upstreams = { ...options.upstreams, media: { baseUrl: media.url, apiKey: 'media-key', timeoutMs: 10_000 } };
    options.models = [...(options.models ?? []), ...mediaModels('media')];
    gw = await startGateway({ ...options, stores: makeStores() });
  });

  afterAll(async () => {
    if (!enabled) return;
    await gw.close();
    await Promise.all([up.close(), media.close()]);
    if (name === 'redis') {
      const c = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(c, PREFIX);
      c.disconnect();
    }
  });

  /** Runs one call (or wallet change); its answer's HTTP status, or null when the client went away first. */
  async function run(account: string, key: string, op: Op): Promise<number | null> {
    const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const post = (path: string, body: unknown, signal?: AbortSignal) =>
      fetch(`${gw.baseURL}${path}`, { method: 'POST', headers: auth, body: JSON.stringify(body), signal });
    try {
      switch (op.kind) {
        case 'chat': {
          const signal = op.outcome === 'client_gone' ? AbortSignal.timeout(80) : undefined;
          const res = await postChat(gw.baseURL, key, { model: MODEL, messages: [{ role: 'user', content: JSON.stringify(op) }] }, { signal });
          await res.text();
          return res.status;
        }
        case 'stream': {
          const ac = new AbortController();
          const res = await postChat(gw.baseURL, key, { model: MODEL, stream: true, messages: [{ role: 'user', content: JSON.stringify(op) }] }, { signal: ac.signal });
          if (op.outcome !== 'client_gone') {
            await res.text();
            return res.status;
          }
          const reader = res.body!.getReader();
          let seen = 0;
          while (seen < 2) {
            const { done, value } = await reader.read();
            if (done) break;
            seen += Buffer.from(value).toString('utf8').split('\n\n').filter((b) => b.includes('"content"')).length;
          }
          ac.abort();
          return null;
        }
        case 'speech': {
          const res = await post('/audio/speech', { model: AUDIO, input: 'Random traffic, billed exactly.', voice: 'alloy' });
          await res.arrayBuffer();
          return res.status;
        }
        case 'image': {
          const res = await post('/images/generations', { model: IMAGE, prompt: op.fail ? 'x [fail]' : 'a boat', n: op.n });
          await res.text();
          return res.status;
        }
        case 'video': {
          const res = await post('/videos', { model: VIDEO, prompt: op.fail ? 'y [fail]' : 'a wave', seconds: op.seconds });
          await res.text();
          return res.status;
        }
        case 'topup':
          await gw.gateway.admin.topUp(account, formatUsd(cents(op.cents)));
          return 200;
        case 'credit':
          await gw.gateway.admin.credit(account, { amountUsd: formatUsd(cents(op.cents)), reason: 'property' });
          return 200;
      }
    } catch (err) {
      if ((err as Error).name !== 'AbortError' && (err as Error).name !== 'TimeoutError') throw err;
      return null;
    }
  }

  it.runIf(enabled)('charges == wallet debits == /key usage, balance == -ledger sum, and no open holds, once every call ended', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 8 }), async (ops) => {
        const account = `acct_prop_${++runs}_${randomBytes(3).toString('hex')}`;
        await gw.gateway.admin.createAccount({ id: account, walletUsd: WALLET_USD });
        const { key } = await gw.gateway.admin.createKey({ account, kind: 'developer' });
        const videosBefore = media.videos().length;
        const statuses = await Promise.all(ops.map((op) => run(account, key, op)));
        // Upstream video jobs finish; the gateway's trackers settle or refund them.
        for (const v of media.videos().slice(videosBefore)) media.finishVideo(v.id);
        await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'every hold to close', 10_000);

        const ledger = await gw.stores.billing.ledger(account);
        const charges = ledger.filter((e) => e.units.kind !== 'credit');
        const charged = charges.reduce((s, e) => s + e.cost, 0n);
        const credited = ops.reduce((s, op) => (op.kind === 'topup' || op.kind === 'credit' ? s + cents(op.cents) : s), 0n);
        const wallet = await gw.stores.billing.wallet(account);
        expect(wallet.held).toBe(0n);
        // Every wallet change is an entry: the opening balance, top-ups and credits too.
        expect(wallet.balance).toBe(-ledger.reduce((s, e) => s + e.cost, 0n));
        expect(BigInt(WALLET_USD) * 1_000_000_000n + credited - wallet.balance).toBe(charged);
        const info = (await (await fetch(`${gw.baseURL}/key`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
          data: { usage: number; wallet: { held: number } };
        };
        // The key's usage is its charges only: top-ups and credits are no spend.
        expect(info.data.usage).toBe(Number(formatUsd(charged)));
        expect(info.data.wallet.held).toBe(0);
        // Every success was billed once; no entry for a call that produced nothing.
        expect(new Set(ledger.map((e) => e.id)).size).toBe(ledger.length);
        for (const e of charges) expect(e.cost > 0n).toBe(true);
        // A call that was answered 200 and produced output is in the ledger. (Under load a call
        // may fail, e.g. an upstream timeout: it is then charged nothing, which the sums check.)
        const produces = (op: Op) =>
          (op.kind === 'chat' && (op.outcome === 'usage' || op.outcome === 'no_usage')) ||
          (op.kind === 'stream' && op.outcome !== 'client_gone') ||
          op.kind === 'speech' ||
          ((op.kind === 'image' || op.kind === 'video') && !op.fail);
        const produced = ops.filter((op, i) => produces(op) && statuses[i] === 200);
        expect(charges.length, `ops ${JSON.stringify(ops)} answered ${JSON.stringify(statuses)}`).toBeGreaterThanOrEqual(produced.length);
        expect(charges.length).toBeLessThanOrEqual(ops.length);
      }),
      { numRuns: 8 },
    );
    // And across every account the runs made: each balance is minus its ledger's sum.
    for (const a of await gw.gateway.admin.listAccounts()) {
      const sum = (await gw.stores.billing.ledger(a.id)).reduce((s, e) => s + e.cost, 0n);
      expect(formatUsd(-sum), a.id).toBe(a.balanceUsd);
    }
  }, 120_000);
});
