/**
 * The gateway's parts, built once by `createServices` and released by the gateway's dispose:
 * the stores, the catalog, the meter (the billed-call lifecycle), upstreams and their breaker,
 * the job runner, the context (brand, knowledge) service, observers and metrics.
 * Operations get them as `Services`; lower layers (stores, billing, upstream transports) never
 * import this file.
 */
import { LRUCache } from 'lru-cache';
import { createAuthenticator, type Authenticator } from './auth/keys.js';
import { fileJournal, memoryJournal } from './billing/journal.js';
import { createMeter, type Meter, type UnobservedCharge } from './billing/meter.js';
import { formatUsd } from './billing/money.js';
import { createTokenizer, type Tokenizer } from './billing/tokens.js';
import { createCatalog, type Catalog } from './catalog/catalog.js';
import { createContextService, type ContextService } from './context/inject.js';
import { createGuardrails, type Guardrails } from './guardrails/index.js';
import { createResponseCache, type ResponseCache } from './cache/cache.js';
import { createJobRunner, type JobRunner } from './jobs/runner.js';
import type { BatchRunner } from './jobs/batches.js';
import { createLimiter, type Limiter } from './limits/limiter.js';
import type { Logger } from './observability/log.js';
import { accessLog, createLogger, redactingLogger } from './observability/logs.js';
import { createMetrics, type Metrics } from './observability/metrics.js';
import type { Observer } from './observability/record.js';
import { createRecentRequests, type RecentRequests } from './observability/recent.js';
import { tracing } from './observability/traces.js';
import { ConfigError, parseOptions, type GatewayConfig, type GatewayConfigInput } from './options.js';
import { createHooks, type GatewayPlugin, type Hooks } from './pipeline/hooks.js';
import { createMemoryStores } from './stores/memory/index.js';
import { createSqliteStores } from './stores/sqlite/index.js';
import type { Budget, Stores } from './stores/types.js';
import { createBreaker, type Breaker } from './upstream/breaker.js';
import { createTokenLimiter, type TokenLimiter } from './limits/tokens.js';
import { createHttpUpstream, customUpstream, type Upstream } from './upstream/client.js';
import { upstreamKeysRedactor } from './upstream/key-redactor.js';
import { createSimulator } from './upstream/simulator/index.js';

export interface Services {
  cfg: GatewayConfig;
  stores: Stores;
  catalog: Catalog;
  auth: Authenticator;
  meter: Meter;
  tokenizer: Tokenizer;
  upstreams: ReadonlyMap<string, Upstream>;
  breaker: Breaker;
  jobs: JobRunner;
  /** Batches (OpenAI's Batch API): run on this instance, adopted from one that stopped. */
  batches: BatchRunner;
  context: ContextService;
  /** The input guardrails, run on every prompt before its hold. */
  guardrails: Guardrails;
  now: () => number;
  log: Logger;
  /** Grants of an account ("Contact sales" models), cached briefly. */
  grants(accountId: string): Promise<readonly string[]>;
  /** Budgets of an account, cached briefly (as its grants). */
  accountBudgets(accountId: string): Promise<readonly Budget[]>;
  /** Tokens per minute per key. */
  tokenLimiter: TokenLimiter;
  /** Registers background work that `dispose()` waits for. */
  track(p: Promise<unknown>): void;
  /** The user plugins' hooks the operations run (onUpstreamRequest; onError for failed streams). */
  hooks: Hooks;
  /** Live counts the metrics read. */
  counters: { openStreams: number };
  /** The last requests this instance answered (the admin API's recent requests). */
  recent: RecentRequests;
  /** Aborted once the stop's grace period is over and background work stops (an alert's delivery among it). */
  shutdown: AbortSignal;
  /**
   * Aborted when the stop begins: batches start no new line, and the lines they run get the
   * grace period from then, the one the calls in flight get.
   */
  stopping: AbortSignal;
  /** True once shutdown's grace period is over: no new billed call is opened. */
  draining(): boolean;
  /** The response cache; null when no model's answers are cached. */
  cache: ResponseCache | null;
}

interface ServicesBase extends Omit<GatewayConfigInput, 'storage'> {
  /** The clock (unix ms). Tests inject one; defaults to Date.now. */
  now?: () => number;
  logger?: Logger;
  /** Plugins, run in this order at each stage (see `GatewayPlugin`). */
  plugins?: GatewayPlugin[];
}

type StorageInput = NonNullable<GatewayConfigInput['storage']>;
type SqliteInput = Extract<StorageInput, { driver: 'sqlite' }>;
/** Storage createGateway builds itself: memory, and SQLite without limits from Redis. */
type StorageBuiltHere = Extract<StorageInput, { driver: 'memory' }> | (SqliteInput & { limits?: undefined });
/**
 * Storage whose stores connect (and PostgreSQL's migrate) asynchronously, which createGateway,
 * a synchronous call, cannot wait for: build them first (`createStores(storage)`, or the
 * driver's own `createPostgresStores`, `createRedisStores`) and pass them as `stores`.
 */
type StorageBuiltFirst = Extract<StorageInput, { driver: 'postgres' | 'redis' }> | (SqliteInput & { limits: NonNullable<SqliteInput['limits']> });

/**
 * The options: `storage` says which stores to use, and a driver that connects asynchronously
 * needs them built and passed as `stores` (the type says so, and createGateway refuses one
 * without them).
 * @example { storage: { driver: 'postgres', url }, stores: await createPostgresStores({ url }) }
 */
export type ServicesOptions = ServicesBase &
  (
    | {
        storage?: StorageBuiltHere;
        /** Stores to use instead of the ones `storage` describes (e.g. Redis stores you built). */
        stores?: Stores;
      }
    | { storage: StorageBuiltFirst; stores: Stores }
  );

/** What createGateway composes the pipeline from, beside the services. */
export interface Built {
  services: Services;
  /** Drops an account's cached grants and budgets (after an admin changed them). */
  forgetGrants(accountId: string): void;
  limiter: Limiter;
  metrics: Metrics | null;
  observers: Observer[];
  /** Whether the stores were built here (and are closed on dispose). */
  ownsStores: boolean;
  /** Marks the grace period over (billed calls are refused from then on). */
  cut(): void;
  /**
   * The stop began (`stopping`): batches take nothing new, and the lines they run get the
   * grace period from now, the same one the calls in flight get.
   */
  beginShutdown(): void;
  /** Aborts background work (`shutdown`, and `stopping` if not yet) and waits for what was tracked. */
  stopBackground(): Promise<void>;
}

/**
 * Builds the services. `builtins` are the gateway's own plugins, run ahead of the user's; they
 * get the services through a getter (they run only once the services exist).
 */
export function createServices(
  options: ServicesOptions,
  builtins: (cfg: GatewayConfig, services: () => Services) => GatewayPlugin[] = () => [],
): Built {
  const { stores: givenStores, now: givenNow, logger, plugins = [], ...config } = options;
  const cfg = parseOptions(config);
  const now = givenNow ?? Date.now;
  const givenLog = logger ?? createLogger(cfg.logLevel);
  // Every line but the access line (ids, codes and timings only) may carry an upstream's words.
  const log = redactingLogger(givenLog, upstreamKeysRedactor(cfg));
  const hooks = createHooks([...builtins(cfg, () => core), ...plugins], log);
  const shutdown = new AbortController();
  const stopping = new AbortController();
  const pending = new Set<Promise<unknown>>();
  let cut = false;

  const counters = { openStreams: 0 };
  const cacheOn = cfg.cache !== null || cfg.models.some((m) => m.cache);
  const metrics = cfg.metrics
    ? createMetrics(cfg.metrics, {
        circuits: () => [...upstreams.keys()].map((u) => [u, breaker.isOpen(u)] as [string, boolean]),
        openHolds: () => core.meter.openCalls(),
        openStreams: () => counters.openStreams,
        ...(cacheOn ? { cache: () => core.cache?.totals() ?? null } : {}),
      })
    : null;
  let stores = givenStores ?? storesFor(cfg, now);
  // Store latency by operation is measured around every store call when metrics are on.
  if (metrics) stores = metrics.timeStores(stores);
  const recent = createRecentRequests(cfg.admin?.recentRequests ?? 1000, now);
  const observers: Observer[] = [...(cfg.accessLog ? [accessLog(givenLog)] : []), ...(metrics ? [metrics.observer] : []), tracing, recent.observer];

  const tokenizer = createTokenizer();
  const upstreams = upstreamsOf(cfg, tokenizer);
  const breaker = createBreaker(now, { probeDeadlineMs: cfg.routing.probeDeadlineMs });
  const { cache: accountCache, read: cachedAccount } = accountSettings(stores);

  const core: Services = {
    cfg,
    stores,
    catalog: createCatalog(cfg, { now, serviceName: cfg.serviceName, isUnavailable: (u) => breaker.isOpen(u) }),
    auth: createAuthenticator(stores.keys),
    meter: createMeter({
      billing: stores.billing,
      journal: cfg.settleJournalDir ? openJournal(cfg.settleJournalDir, cfg.settleJournalAdopt, stores.identity) : memoryJournal(),
      now,
      log,
      holdTtlMs: cfg.limits.holdTtlMs,
      // A billable request's key-rate check rides on its hold when the windows live beside the books.
      windowsId: stores.limits.windowsId,
      // Not awaited: a slow plugin never holds up the answer or the next settle.
      onBilled: hooks.has('onBilled') ? (entry) => void hooks.run('onBilled', { entry }) : undefined,
      onUnobservedCharge: (c) => reportCharge(c, log, metrics),
    }),
    tokenizer,
    upstreams,
    breaker,
    now,
    log,
    grants: async (accountId) => (await cachedAccount(accountId)).grants,
    accountBudgets: async (accountId) => (await cachedAccount(accountId)).budgets,
    tokenLimiter: createTokenLimiter(cfg.limits.keyTokensPerMinute, stores.limits, log),
    track(p) {
      pending.add(p);
      void p.finally(() => pending.delete(p));
    },
    hooks,
    counters,
    recent,
    shutdown: shutdown.signal,
    stopping: stopping.signal,
    draining: () => cut,
    // Set right below: the job runner needs the rest of the services.
    jobs: undefined as unknown as JobRunner,
    // Set by the gateway: the batch runner runs operations.
    batches: undefined as unknown as BatchRunner,
    context: createContextService({ cfg, stores }),
    guardrails: createGuardrails(cfg.guardrails, hooks, log, () => core),
    cache: cacheOn ? createResponseCache(cfg.cache, cfg.models, stores.responseCache, log, now) : null,
  };
  core.jobs = createJobRunner(core);
  // Wallets and the ledger live only in the stores: say so at start-up when they keep nothing.
  stores
    .durabilityWarning?.()
    .then((warning) => warning && log.warn({ msg: warning }))
    .catch(() => undefined); // an unreachable store is reported by readiness and by every call
  return {
    services: core,
    forgetGrants: (id) => void accountCache.delete(id),
    limiter: createLimiter(cfg, stores.limits),
    metrics,
    observers,
    ownsStores: !givenStores,
    cut: () => void (cut = true),
    beginShutdown: () => stopping.abort(),
    async stopBackground() {
      stopping.abort();
      shutdown.abort();
      core.jobs.dispose();
      await Promise.allSettled([...pending]);
    },
  };
}

/**
 * An account's grants and budgets, read through a short cache: every billed call needs them,
 * and a change reaches the instance within the cache's 5 s (or at once, on this instance, when
 * the admin API forgets it).
 */
function accountSettings(stores: Stores) {
  const cache = new LRUCache<string, { grants: readonly string[]; budgets: readonly Budget[] }>({ max: 10_000, ttl: 5_000 });
  const read = async (accountId: string) => {
    let a = cache.get(accountId);
    if (!a) {
      const account = await stores.accounts.get(accountId);
      a = { grants: account?.grants ?? [], budgets: account?.budgets ?? [] };
      cache.set(accountId, a);
    }
    return a;
  };
  return { cache, read };
}

/** The stores `storage` describes, when they can be built synchronously (memory, SQLite). */
function storesFor(cfg: GatewayConfig, now: () => number): Stores {
  const storage = cfg.storage;
  if (storage.driver === 'memory') return createMemoryStores({ now });
  if (storage.driver === 'sqlite' && !storage.limits) return createSqliteStores({ path: storage.path, synchronous: storage.synchronous, now, ...(storage.timeoutMs === undefined ? {} : { timeoutMs: storage.timeoutMs }) });
  // These connect (and PostgreSQL migrates) asynchronously; createGateway is synchronous.
  const what = `storage.driver "${storage.driver}"${'limits' in storage && storage.limits ? ' with limits from Redis' : ''}`;
  // Refused here, when the gateway is created, never per request.
  throw new ConfigError(
    `${what} needs stores built first: import { createStores } from "model-gateway" and pass \`stores: await createStores(storage)\`, or use the CLI.`,
  );
}

function upstreamsOf(cfg: GatewayConfig, tokenizer: Tokenizer): Map<string, Upstream> {
  const upstreams = new Map<string, Upstream>();
  for (const [name, u] of Object.entries(cfg.upstreams)) {
    if ('call' in u) upstreams.set(name, customUpstream(name, u));
    else upstreams.set(name, 'simulate' in u ? createSimulator(name, u, tokenizer) : createHttpUpstream(name, u));
  }
  return upstreams;
}

/** A charge no request's access line carries (a video job): its own log line, and the metrics. */
function reportCharge(c: UnobservedCharge, log: Logger, metrics: Metrics | null): void {
  log.info({ msg: 'job billed', job_id: c.entryId, account: c.accountId, model: c.model, units: c.units, cost_usd: formatUsd(c.cost) });
  metrics?.charge(c.model, c.units, c.cost);
}

/**
 * The settle journal in `dir`, or a ConfigError naming the option when the directory cannot
 * be made or used (a file of that name, no permission): a start error to act on, not a
 * stack trace.
 */
function openJournal(dir: string, adopt: readonly string[], store: string | undefined) {
  try {
    return fileJournal(dir, { adopt, store });
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'EEXIST' || (err as NodeJS.ErrnoException).code === 'ENOTDIR' ? 'it is not a directory' : (err as Error).message;
    throw new ConfigError(`invalid gateway options:\n  settleJournalDir: cannot keep the settle journal in "${dir}": ${why}`);
  }
}
