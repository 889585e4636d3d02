/**
 * Prometheus metrics (prom-client, a registry of the gateway's own, so two gateways in one
 * process never mix their numbers), served outside /v1 when the options say
 * `metrics: {path: "/metrics", token?}`. Every name starts with `model_gateway_`. Amounts of
 * money here are for dashboards only: USD as floating-point sums, never read back as money.
 */
import { timingSafeEqual, createHash } from 'node:crypto';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { GatewayError, errorResponse } from '../errors.js';
import type { Stores } from '../stores/types.js';
import { Response } from '@whatwg-node/server';
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
}

export interface Metrics {
  observer: Observer;
  /** Wraps stores so each call's latency is measured by operation. */
  timeStores(stores: Stores): Stores;
  /** The answer to a scrape of `path`. */
  answer(request: Request, requestId: string): Promise<Response>;
}

const LATENCY = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const OVERHEAD = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];
const STORE = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1];

export function createMetrics(options: MetricsOptions, deps: MetricsDeps): Metrics {
  const registry = new Registry();
  // Process metrics, event-loop lag among them.
  collectDefaultMetrics({ register: registry, prefix: 'model_gateway_' });
  const requests = new Counter({
    name: 'model_gateway_requests_total',
    help: 'Requests answered, by route, status and model.',
    labelNames: ['route', 'status', 'model'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'model_gateway_request_duration_seconds',
    help: 'Total time of a request, to the end of its answer (streams included).',
    labelNames: ['route'],
    buckets: LATENCY,
    registers: [registry],
  });
  const overhead = new Histogram({
    name: 'model_gateway_overhead_seconds',
    help: "The gateway's own time before the answer went out: total time to the answer's headers minus the wait on the upstream.",
    labelNames: ['route'],
    buckets: OVERHEAD,
    registers: [registry],
  });
  const ttft = new Histogram({
    name: 'model_gateway_time_to_first_token_seconds',
    help: 'Streams: time from arrival to the first byte of the answer.',
    labelNames: ['model'],
    buckets: LATENCY,
    registers: [registry],
  });
  const tokens = new Counter({
    name: 'model_gateway_tokens_total',
    help: 'Tokens billed, by model and direction (in: prompt, out: completion).',
    labelNames: ['model', 'direction'],
    registers: [registry],
  });
  const spend = new Counter({
    name: 'model_gateway_spend_usd_total',
    help: 'USD billed, by model (for dashboards; the ledger is the exact figure).',
    labelNames: ['model'],
    registers: [registry],
  });
  const refusals = new Counter({
    name: 'model_gateway_refusals_total',
    help: 'Requests refused by a limit, by limit.',
    labelNames: ['limit'],
    registers: [registry],
  });
  new Gauge({
    name: 'model_gateway_circuit_open',
    help: 'Whether an upstream circuit is open (1) or closed (0).',
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
  const storeCalls = new Histogram({
    name: 'model_gateway_store_call_seconds',
    help: 'Latency of store calls, by operation (store.method).',
    labelNames: ['operation'],
    buckets: STORE,
    registers: [registry],
  });

  const observer: Observer = {
    end(r, totalMs) {
      requests.inc({ route: r.route, status: String(r.status), model: r.model ?? '' });
      duration.observe({ route: r.route }, totalMs / 1000);
      if (r.respondedMs !== null) overhead.observe({ route: r.route }, Math.max(0, r.respondedMs - r.upstreamMs) / 1000);
      if (r.ttfbMs !== null && r.model) ttft.observe({ model: r.model }, r.ttfbMs / 1000);
      if (r.model && r.promptTokens !== null) tokens.inc({ model: r.model, direction: 'in' }, r.promptTokens);
      if (r.model && r.completionTokens !== null) tokens.inc({ model: r.model, direction: 'out' }, r.completionTokens);
      if (r.model && r.costNano !== null) spend.inc({ model: r.model }, Number(r.costNano) / 1e9);
      if (r.limit) refusals.inc({ limit: r.limit });
    },
  };

  const tokenDigest = options.token ? createHash('sha256').update(options.token).digest() : null;

  return {
    observer,
    timeStores(stores) {
      const wrap = (name: string, store: object): object => {
        const cache = new Map<PropertyKey, unknown>();
        return new Proxy(store, {
          get(target, key, receiver) {
            const v = Reflect.get(target, key, receiver) as unknown;
            if (typeof v !== 'function' || typeof key !== 'string') return v;
            let w = cache.get(key);
            if (!w) {
              const end = storeCalls.labels({ operation: `${name}.${key}` });
              const fn = v as (...a: unknown[]) => unknown;
              w = (...args: unknown[]) => {
                const t = performance.now();
                const out = fn.apply(target, args);
                if (out instanceof Promise) return out.finally(() => end.observe((performance.now() - t) / 1000));
                end.observe((performance.now() - t) / 1000);
                return out;
              };
              cache.set(key, w);
            }
            return w;
          },
        });
      };
      const out: Record<string, unknown> = {};
      for (const [name, store] of Object.entries(stores)) {
        out[name] = typeof store === 'object' && store !== null ? wrap(name, store) : typeof store === 'function' ? store.bind(stores) : store;
      }
      return out as unknown as Stores;
    },
    async answer(request, requestId) {
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        return errorResponse(
          new GatewayError('method_not_allowed', `Method ${request.method.slice(0, 20)} is not allowed on ${options.path}.`, {
            headers: { allow: 'GET, HEAD' },
          }),
          requestId,
        );
      }
      if (tokenDigest) {
        const auth = request.headers.get('authorization') ?? '';
        const given = createHash('sha256').update(auth.startsWith('Bearer ') ? auth.slice(7) : '').digest();
        if (!timingSafeEqual(given, tokenDigest)) {
          return errorResponse(new GatewayError('invalid_api_key', 'The metrics endpoint needs its bearer token.'), requestId);
        }
      }
      return new Response(await registry.metrics(), {
        status: 200,
        headers: { 'content-type': registry.contentType, 'x-request-id': requestId, 'cache-control': 'no-store' },
      });
    },
  };
}
