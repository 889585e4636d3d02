/**
 * Prometheus metrics (prom-client, a registry of the gateway's own, so two gateways in one
 * process never mix their numbers), served outside /v1 when the options say
 * `metrics: {path: "/metrics", token?}`. Every name starts with `model_gateway_`. Amounts of
 * money here are for dashboards only: USD as floating-point sums, never read back as money.
 */
import { timingSafeEqual, createHash } from 'node:crypto';
import cluster from 'node:cluster';
import { AggregatorRegistry, Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { CacheTally } from '../cache/cache.js';
import { usdNumber } from '../billing/money.js';
import { GatewayError } from '../errors.js';
import type { LedgerUnits, Stores } from '../stores/types.js';
import { Response } from '@whatwg-node/server';
import { HotCounter, HotHistogram } from './hot-metrics.js';
import type { Observer } from './record.js';

export interface MetricsOptions {
  path: string;
  /** When set, scrapes must send `Authorization: Bearer <token>`. */
  token?: string | undefined;
}

export interface MetricsDeps {
  /** Upstream names and whether each one's circuit is open. */
  circuits: () => Iterable<[string, boolean]>;
  openHolds: () => number;
  openStreams: () => number;
  /** The response cache's counts so far, or null when it is off. */
  cache?: () => CacheTally | null;
}

export interface Metrics {
  observer: Observer;
  /** A charge no request's record carries (a video job billed when it finished). */
  charge(model: string, units: LedgerUnits, costNano: bigint): void;
  /** Wraps stores so each call's latency is measured by operation. */
  timeStores(stores: Stores): Stores;
  /** The answer to a scrape of `path`. */
  answer(request: Request, requestId: string): Promise<Response>;
}

const LATENCY = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const OVERHEAD = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];
/** Status codes as label text, made once each. */
const STATUS_TEXT = new Map<number, string>();
const statusText = (status: number): string => {
  let text = STATUS_TEXT.get(status);
  if (text === undefined) STATUS_TEXT.set(status, (text = String(status)));
  return text;
};
const STORE = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1];

/** A worker's ask to the primary for every worker's metrics, and its answer (serve --workers). */
export const CLUSTER_METRICS = 'model-gateway:metrics';
/**
 * Set in the environment of the workers `serve --workers` forks. Only they gather: an app that
 * runs its own cluster (PM2, its own primary) keeps per-process metrics and prom-client's
 * registries as it set them, and a scrape never waits on a primary that does not answer.
 */
export const GATEWAY_WORKER_ENV = 'MODEL_GATEWAY_WORKER';
const gatewayWorker = (): boolean => cluster.isWorker && process.env[GATEWAY_WORKER_ENV] === '1' && typeof process.send === 'function';

/** This worker process's registries, which the primary gathers (prom-client's cluster protocol). */
const workerRegistries: Registry[] = [];
let asked = 0;
const answers = new Map<number, (text: string | null) => void>();

/** Under `serve --workers`: `registry` is gathered with this worker's others when any worker is scraped. */
function joinCluster(registry: Registry): void {
  if (!gatewayWorker()) return;
  if (workerRegistries.length === 0) {
    // Answers the primary's requests for this process's metrics.
    new AggregatorRegistry();
    process.on('message', (m: { kind?: unknown; id?: unknown; text?: unknown } | null) => {
      if (m?.kind !== CLUSTER_METRICS || typeof m.id !== 'number') return;
      answers.get(m.id)?.(typeof m.text === 'string' ? m.text : null);
      answers.delete(m.id);
    });
  }
  workerRegistries.push(registry);
  AggregatorRegistry.setRegistries(workerRegistries);
}

/**
 * Under `serve --workers`, a scrape reaches one worker of several on one port: it answers
 * every worker's metrics, summed by the primary (counters, histograms, gauges; prom-client's
 * own rule per process metric), so counters never jump between processes. Null outside a
 * worker, or when the primary does not answer in time (the worker then answers its own).
 */
function clusterMetrics(): Promise<string | null> | null {
  if (!gatewayWorker() || workerRegistries.length === 0) return null;
  const id = ++asked;
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      answers.delete(id);
      resolve(null);
    }, 6_000);
    answers.set(id, (text) => {
      clearTimeout(timer);
      resolve(text);
    });
    process.send!({ kind: CLUSTER_METRICS, id });
  });
}

export function createMetrics(options: MetricsOptions, deps: MetricsDeps): Metrics {
  const registry = new Registry();
  joinCluster(registry);
  // Process metrics, event-loop lag among them.
  collectDefaultMetrics({ register: registry, prefix: 'model_gateway_' });
  // The request path's counters and histograms (see hot-metrics.ts: no per-update label hashing).
  const requests = new HotCounter('model_gateway_requests_total', 'Requests answered, by route, status and model.', ['route', 'status', 'model'], registry);
  const duration = new HotHistogram(
    'model_gateway_request_duration_seconds',
    'Total time of a request, to the end of its answer (streams included).',
    ['route'],
    LATENCY,
    registry,
  );
  const overhead = new HotHistogram(
    'model_gateway_overhead_seconds',
    "The gateway's own time before the answer went out: total time to the answer's headers minus the wait on the upstream.",
    ['route'],
    OVERHEAD,
    registry,
  );
  const ttft = new HotHistogram('model_gateway_time_to_first_token_seconds', 'Streams: time from arrival to the first byte of the answer.', ['model'], LATENCY, registry);
  const tokens = new HotCounter('model_gateway_tokens_total', 'Tokens billed, by model and direction (in: prompt, out: completion).', ['model', 'direction'], registry);
  const spend = new HotCounter('model_gateway_spend_usd_total', 'USD billed, by model (for dashboards; the ledger is the exact figure).', ['model'], registry);
  const refusals = new HotCounter('model_gateway_refusals_total', 'Requests refused by a limit, by limit.', ['limit'], registry);
  const guardrails = new HotCounter(
    'model_gateway_guardrail_actions_total',
    'Guardrails that acted on a prompt or an answer, by guardrail and action (redact, block, unavailable).',
    ['guardrail', 'action'],
    registry,
  );
  registerGauges(registry, deps);
  registerCache(registry, deps);
  const storeCalls = new HotHistogram('model_gateway_store_call_seconds', 'Latency of store calls, by operation (store.method).', ['operation'], STORE, registry);

  const observer: Observer = {
    end(r, totalMs) {
      const model = r.model ?? '';
      requests.inc(1, r.route, statusText(r.status), model);
      duration.observe(totalMs / 1000, r.route);
      if (r.respondedMs !== null) overhead.observe(Math.max(0, r.respondedMs - r.upstreamMs) / 1000, r.route);
      if (r.ttfbMs !== null && model) ttft.observe(r.ttfbMs / 1000, model);
      if (model && r.promptTokens !== null) tokens.inc(r.promptTokens, model, 'in');
      if (model && r.completionTokens !== null) tokens.inc(r.completionTokens, model, 'out');
      if (model && r.costNano !== null) spend.inc(Number(r.costNano) / 1e9, model);
      if (r.limit) refusals.inc(1, r.limit);
      if (r.guardrails) for (const g of r.guardrails) guardrails.inc(1, g.id, g.action);
    },
  };

  const tokenDigest = options.token ? createHash('sha256').update(options.token).digest() : null;

  return {
    observer,
    charge(model, units, costNano) {
      if (units.kind === 'tokens') {
        tokens.inc(units.prompt, model, 'in');
        tokens.inc(units.completion, model, 'out');
      }
      spend.inc(Number(costNano) / 1e9, model);
    },
    timeStores: (stores) => timeStores(stores, storeCalls),
    async answer(request, requestId) {
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        // Thrown, as the token's refusal: the error stage answers, and the access line names its code.
        throw new GatewayError('method_not_allowed', `Method ${request.method.slice(0, 20)} is not allowed on ${options.path}.`, {
          headers: { allow: 'GET, HEAD' },
        });
      }
      if (tokenDigest) {
        const auth = request.headers.get('authorization') ?? '';
        const given = createHash('sha256').update(auth.startsWith('Bearer ') ? auth.slice(7) : '').digest();
        if (!timingSafeEqual(given, tokenDigest)) {
          throw new GatewayError('invalid_api_key', 'The metrics endpoint needs its bearer token.');
        }
      }
      const text = (await clusterMetrics()) ?? (await registry.metrics());
      return new Response(text, {
        status: 200,
        headers: { 'content-type': registry.contentType, 'x-request-id': requestId, 'cache-control': 'no-store' },
      });
    },
  };
}

/** Gauges read from the gateway's state at scrape time. */
function registerGauges(registry: Registry, deps: MetricsDeps): void {
  new Gauge({
    name: 'model_gateway_circuit_open',
    help: 'Whether an upstream circuit is open (1) or closed (0).',
    // Under --workers each worker keeps its own circuits: open when any worker's is (not their count).
    aggregator: 'max',
    labelNames: ['upstream'],
    registers: [registry],
    collect() {
      for (const [upstream, open] of deps.circuits()) this.set({ upstream }, open ? 1 : 0);
    },
  });
  new Gauge({
    name: 'model_gateway_open_streams',
    help: 'Streamed answers being relayed now.',
    registers: [registry],
    collect() {
      this.set(deps.openStreams());
    },
  });
  new Gauge({
    name: 'model_gateway_open_holds',
    help: 'Billed calls open on this instance (held, not yet billed or cancelled).',
    registers: [registry],
    collect() {
      this.set(deps.openHolds());
    },
  });
}

/** The response cache's counts, read at scrape time (only when it is on). */
function registerCache(registry: Registry, deps: MetricsDeps): void {
  const tally = deps.cache;
  if (!tally) return;
  const counter = (name: string, help: string, read: (t: CacheTally) => number) =>
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        const t = tally();
        this.reset();
        // A counter never goes down (prom-client throws, and the whole scrape would fail).
        const value = t ? read(t) : 0;
        if (value > 0) this.inc(value);
      },
    });
  counter('model_gateway_cache_hits_total', 'Requests answered from the response cache.', (t) => t.hits);
  counter('model_gateway_cache_misses_total', 'Cacheable requests the response cache could not answer (sent upstream, then stored).', (t) => t.misses);
  counter('model_gateway_cache_bypasses_total', 'Cacheable requests that refused the cache (Cache-Control: no-store).', (t) => t.bypasses);
  counter('model_gateway_cache_stored_bytes_total', 'Bytes of answers written to the response cache.', (t) => t.storedBytes);
  counter('model_gateway_cache_saved_usd_total', 'What cache hits would have cost as upstream calls, less what they were billed (USD, for dashboards).', (t) => usdNumber(t.savedNano));
}

/** Copies `stores` with every method of every store timed into `storeCalls`, by store.method. */
function timeStores(stores: Stores, storeCalls: HotHistogram): Stores {
  const out: Record<string, unknown> = {};
  for (const [name, store] of Object.entries(stores)) {
    out[name] = typeof store === 'object' && store !== null ? timedStore(name, store, storeCalls) : typeof store === 'function' ? store.bind(stores) : store;
  }
  return out as unknown as Stores;
}

/**
 * The store copied into a plain object whose methods time the store's own (a Proxy would run a
 * trap on every property read of the request path).
 */
function timedStore(name: string, store: object, storeCalls: HotHistogram): object {
  const out: Record<string, unknown> = {};
  for (let o: object | null = store; o && o !== Object.prototype; o = Object.getPrototypeOf(o) as object | null) {
    for (const key of Object.getOwnPropertyNames(o)) {
      if (key === 'constructor' || key in out) continue;
      const v = (store as Record<string, unknown>)[key];
      if (typeof v !== 'function') {
        Object.defineProperty(out, key, { get: () => (store as Record<string, unknown>)[key], enumerable: true });
        continue;
      }
      const fn = v as (...a: unknown[]) => unknown;
      const operation = `${name}.${key}`;
      const done = (t: number) => storeCalls.observe((performance.now() - t) / 1000, operation);
      out[key] = (...args: unknown[]) => {
        const t = performance.now();
        const result = fn.apply(store, args);
        if (result instanceof Promise) {
          return result.then(
            (value) => {
              done(t);
              return value;
            },
            (err: unknown) => {
              done(t);
              throw err;
            },
          );
        }
        done(t);
        return result;
      };
    }
  }
  return out;
}
