/**
 * The response cache: an exact-match store of whole answers, per account (or key) and model.
 *
 * A request's entry is keyed by its account (and key, when the scope is per key), its model,
 * and the body the upstream would receive (brand, knowledge, the plugins' and the guardrails'
 * changes and the output cap in), less `stream` and `stream_options`: a plain and a streamed
 * request of the same body share an entry, and two accounts never do. The request's
 * `Cache-Control` may refuse it: `no-store` neither reads nor writes, `no-cache` skips the
 * lookup and stores the fresh answer over the old one.
 */
import { createHash } from 'node:crypto';
import type { Usage } from '../billing/usage.js';
import type { Logger } from '../observability/log.js';
import type { CacheConfig, ModelCacheConfig } from '../options/cache.js';
import type { ResponseCacheStore } from '../stores/types.js';
import { type CacheEntry, type CacheFormat, isObject } from './format.js';

export type CacheState = 'HIT' | 'MISS' | 'BYPASS';

/** The cache's settings for one model. */
export type CacheSettings = CacheConfig;

/** Hits, misses and savings, in all and per account and model (for the metrics and the console). */
export interface CacheTally {
  hits: number;
  misses: number;
  bypasses: number;
  /** Bytes of entries written. */
  storedBytes: number;
  /** What hits would have cost as upstream calls, less what they cost (nano-USD). */
  savedNano: bigint;
}

const emptyTally = (): CacheTally => ({ hits: 0, misses: 0, bypasses: 0, storedBytes: 0, savedNano: 0n });

/** A request's way through the cache, once its upstream body is known. */
export interface CacheTicket {
  state: CacheState;
  /** The stored answer (a hit), with its age in seconds. */
  hit?: { entry: CacheEntry; ageSeconds: number };
  /** Stores the whole answer (a miss, or a refresh); never throws. */
  store(entry: CacheEntry): Promise<void>;
}

const NOOP_STORE = async () => {};

/** JSON with every object's keys in order: the same body sent with its fields in another order is the same request. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (isObject(value)) {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

export interface ResponseCache {
  /** The cache's settings for `modelId`, or null when its answers are not cached. */
  settingsFor(modelId: string): CacheSettings | null;
  /**
   * Looks `body` (what the upstream would receive) up for the request, as its Cache-Control
   * allows; a hit is not yet billed.
   */
  lookup(req: CacheRequest): Promise<CacheTicket>;
  /** Counts a hit billed at `costNano` whose answer had a list cost of `listNano`. */
  countHit(accountId: string, model: string, listNano: bigint, costNano: bigint): void;
  /** Drops every entry (only `account`'s when given). */
  purge(account?: string): Promise<number>;
  /** The counts so far, in all. */
  totals(): CacheTally;
  /** The counts so far: in all, and per account and model. */
  tally(): { total: CacheTally; byAccountModel: Array<{ account: string; model: string } & CacheTally> };
}

export interface CacheRequest {
  settings: CacheSettings;
  accountId: string;
  keyId: string;
  /** The model the client called. */
  model: string;
  /** The endpoint (one entry per endpoint: chat and Messages answers differ for one body). */
  path: string;
  body: Record<string, unknown>;
  cacheControl: string | null;
  /** The answer is rewritten for the client (output guardrails): served from no entry, kept in none. */
  bypass?: boolean;
  format: CacheFormat;
}

export function createResponseCache(top: CacheConfig | null, models: ReadonlyArray<{ id: string; cache?: ModelCacheConfig | undefined }>, entries: ResponseCacheStore, log: Logger, now: () => number): ResponseCache {
  const perModel = new Map<string, CacheSettings | null>();
  const defaults: CacheConfig = { ttlSeconds: 3600, hitPrice: '0', scope: 'account', maxEntryBytes: 1024 * 1024, maxBytesPerAccount: 64 * 1024 * 1024 };
  for (const m of models) {
    if (m.cache === false) perModel.set(m.id, null);
    else if (m.cache) perModel.set(m.id, { ...(top ?? defaults), ...Object.fromEntries(Object.entries(m.cache).filter(([, v]) => v !== undefined)) });
  }
  const total = emptyTally();
  const byAccountModel = new Map<string, { account: string; model: string } & CacheTally>();
  const tallyOf = (account: string, model: string) => {
    const k = `${account}\u0000${model}`;
    let t = byAccountModel.get(k);
    if (!t) {
      // Bounded: the console shows a few; the totals keep counting.
      if (byAccountModel.size >= 10_000) return emptyTally();
      byAccountModel.set(k, (t = { account, model, ...emptyTally() }));
    }
    return t;
  };
  const count = (account: string, model: string, f: (t: CacheTally) => void) => {
    f(total);
    f(tallyOf(account, model));
  };

  return {
    settingsFor: (modelId) => (perModel.has(modelId) ? perModel.get(modelId)! : top),
    async lookup(req) {
      const directives = (req.cacheControl ?? '').toLowerCase();
      if (req.bypass || /(^|[\s,])no-store($|[\s,=])/.test(directives)) {
        count(req.accountId, req.model, (t) => t.bypasses++);
        return { state: 'BYPASS', store: NOOP_STORE };
      }
      const { stream: _stream, stream_options: _options, ...rest } = req.body;
      const scope = req.settings.scope === 'key' ? `key:${req.keyId}` : 'account';
      const hash = createHash('sha256').update(canonical([scope, req.model, req.path, rest])).digest('hex');
      const key = `${req.accountId}:${hash}`;
      const store = async (entry: CacheEntry) => {
        try {
          // An answer too deep to encode again is not kept (it already went out, paid for).
          const value = JSON.stringify({ body: entry.body, usage: entry.usage, tools: entry.tools ?? null });
          const bytes = Buffer.byteLength(value);
          if (bytes > req.settings.maxEntryBytes) {
            // Too large to keep, it still replaces what was kept under its key (a refresh must
            // not leave the old answer there): a value over the bound given drops the entry
            // and is not stored.
            await entries.put(req.accountId, key, value, req.settings.ttlSeconds * 1000, req.settings.maxEntryBytes);
            return;
          }
          await entries.put(req.accountId, key, value, req.settings.ttlSeconds * 1000, req.settings.maxBytesPerAccount);
          count(req.accountId, req.model, (t) => (t.storedBytes += bytes));
        } catch (err) {
          // An answer the cache could not keep is still the client's: only the next call misses.
          log.warn({ msg: 'response cache write failed', err: err instanceof Error ? err.message : String(err) });
        }
      };
      if (!/(^|[\s,])no-cache($|[\s,=])/.test(directives)) {
        const found = await readEntry(key);
        if (found) return { state: 'HIT', hit: found, store: NOOP_STORE };
      }
      count(req.accountId, req.model, (t) => t.misses++);
      return { state: 'MISS', store };
    },
    countHit(accountId, model, listNano, costNano) {
      count(accountId, model, (t) => {
        t.hits++;
        t.savedNano += listNano - costNano;
      });
    },
    purge: (account) => entries.purge(account),
    totals: () => ({ ...total }),
    tally: () => ({ total: { ...total }, byAccountModel: [...byAccountModel.values()].map((t) => ({ ...t })) }),
  };

  async function readEntry(key: string): Promise<{ entry: CacheEntry; ageSeconds: number } | null> {
    let found: Awaited<ReturnType<ResponseCacheStore['get']>>;
    try {
      found = await entries.get(key);
    } catch (err) {
      // A cache that does not answer is a miss: the request goes upstream as without a cache.
      log.warn({ msg: 'response cache read failed', err: err instanceof Error ? err.message : String(err) });
      return null;
    }
    if (!found) return null;
    let parsed: unknown;
    try {
      parsed = JSON.parse(found.value);
    } catch {
      return null;
    }
    if (!isObject(parsed) || !isObject(parsed.body) || !isObject(parsed.usage)) return null;
    // An entry whose tool counts cannot be read is no entry: its price would be wrong. One
    // without the field was kept before entries counted them: it may have made a priced call.
    if (parsed.tools === undefined) return null;
    const tools = parsed.tools === null ? null : toolCounts(parsed.tools);
    if (tools === undefined) return null;
    const entry: CacheEntry = { body: parsed.body, usage: parsed.usage as unknown as Usage, tools };
    return { entry, ageSeconds: Math.max(0, Math.floor((now() - found.storedAt) / 1000)) };
  }
}

/** A stored entry's tool counts (`{web_search: 2}`), or undefined when they are not counts. */
function toolCounts(value: unknown): Record<string, number> | undefined {
  if (!isObject(value)) return undefined;
  for (const n of Object.values(value)) if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) return undefined;
  return value as Record<string, number>;
}
