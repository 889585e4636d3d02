/**
 * createGateway(options) -> a @whatwg-node/server adapter: mount it on node:http as is, call
 * `.fetch(Request)` in tests, `dispose()` to release everything. The route table and the
 * order of checks (IP throttle, then auth, then the key's rate) live here.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServerAdapter, type ServerAdapter, type ServerAdapterBaseObject } from '@whatwg-node/server';
import { LRUCache } from 'lru-cache';
import { createAdmin, seed, type Admin } from './admin/accounts.js';
import { createAdminHttp, type AdminHttpOptions } from './admin/http.js';
import { budgetAlerts } from './alerts/alerts.js';
import { createAuthenticator } from './auth/keys.js';
import { fileJournal, memoryJournal } from './billing/journal.js';
import { createMeter } from './billing/meter.js';
import { createTokenizer } from './billing/tokens.js';
import { createCatalog } from './catalog/catalog.js';
import type { Services, RequestContext, RouteHandler } from './services.js';
import { GatewayError, errorResponse, errors } from './errors.js';
import { readBody } from './http/body.js';
import { NodeRequest, writeAnswer } from './http/node-lane.js';
import { newRequestId } from './http/request-id.js';
import { withIdempotency } from './pipeline/idempotency.js';
import { createLimiter } from './limits/limiter.js';
import type { Logger } from './observability/log.js';
import { accessLog, createLogger, flushLogger } from './observability/logs.js';
import { createMetrics } from './observability/metrics.js';
import { newRecord, type Observer, track as trackRecord, type Tracked } from './observability/record.js';
import { startRequestSpan, tracing } from './observability/traces.js';
import { parseOptions, type GatewayConfigInput } from './options.js';
import { chatCompletions } from './routes/chat.js';
import { listBrands, listKnowledge, listModels, readKey, retrieveModel } from './routes/discovery.js';
import { createCompletion } from './routes/completions.js';
import { createEmbeddings } from './routes/embeddings.js';
import { createResponse } from './routes/responses.js';
import { adoptLostImage, createImage } from './routes/images.js';
import { getJob } from './routes/media.js';
import { createSpeech } from './routes/speech.js';
import { adoptVideo } from './routes/videos/adopt.js';
import { videoContent } from './routes/videos/content.js';
import { deleteVideo, listVideos } from './routes/videos/list.js';
import { createVideo } from './routes/videos/create.js';
import { createJobRunner, type JobRunner } from './jobs/runner.js';
import { createContextService } from './context/inject.js';
import { createCors } from './pipeline/cors.js';
import { createProbes, type StartupState } from './pipeline/probes.js';
import { createMemoryStores } from './stores/memory/index.js';
import { createSqliteStores } from './stores/sqlite/index.js';
import { isStoreUnavailable } from './stores/errors.js';
import type { ApiKeyRecord, Stores } from './stores/types.js';
import { createHooks, type GatewayPlugin, pluginKey } from './pipeline/hooks.js';
import { createBreaker } from './upstream/breaker.js';
import { createHttpUpstream, customUpstream, type Upstream } from './upstream/client.js';
import { createSimulator } from './upstream/simulator.js';

export interface GatewayOptions extends GatewayConfigInput {
  /** Stores to use instead of the ones `storage` describes (e.g. a Redis store you built). */
  stores?: Stores;
  /** The clock (unix ms). Tests inject one; defaults to Date.now. */
  now?: () => number;
  logger?: Logger;
  /** Path prefix in front of /v1 when the host app does not strip it (e.g. "/api"). */
  basePath?: string;
  /** Plugins, run in this order at each stage (see `GatewayPlugin`). */
  plugins?: GatewayPlugin[];
}

/** What the server context may carry: node:http's req, or an adapter's client address. */
export interface GatewayServerContext {
  /**
   * node:http's request: its `url` is the request target exactly as the client sent it
   * (`originalUrl` when a framework that strips mount paths handed it over).
   */
  req?: { url?: string | undefined; originalUrl?: string | undefined; socket?: { remoteAddress?: string | undefined } };
  clientAddress?: string;
}

/**
 * The path and query of a request, read from the request target only. On node:http the
 * server adapter builds `request.url` by pasting the Host header in front of the target, so a
 * Host such as "x/v1/images/generations?" would move the path; node's own `req.url` is the
 * target as sent. Elsewhere `request.url` was parsed as a URL, whose authority cannot hold a
 * "/" or "?".
 */
function requestTarget(request: Request, serverContext: GatewayServerContext | undefined): { path: string; query: string } {
  let target = serverContext?.req?.originalUrl ?? serverContext?.req?.url;
  if (typeof target !== 'string' || !target.startsWith('/')) {
    // An adapter's Request, or an absolute-form target ("http://host/path"): its URL parse.
    const url = typeof target === 'string' && target !== '' && target !== '*' ? target : request.url;
    const authority = url.indexOf('//');
    const pathStart = url.indexOf('/', authority === -1 ? 0 : authority + 2);
    target = pathStart === -1 ? '/' : url.slice(pathStart);
  }
  const queryStart = target.indexOf('?');
  const end = queryStart === -1 ? target.length : queryStart;
  // A fragment is never part of the path or the query.
  const hash = target.indexOf('#');
  return {
    path: target.slice(0, hash !== -1 && hash < end ? hash : end),
    query: queryStart === -1 ? '' : target.slice(queryStart + 1, hash > queryStart ? hash : undefined),
  };
}

export interface GatewayExtras {
  /** Resolves when seeding (accounts, keys, brands, documents from the options) is done. */
  ready: Promise<void>;
  admin: Admin;
  /** The validated options. */
  config: ReturnType<typeof parseOptions>;
  /** Whether any upstream is the built-in simulator. */
  usesSimulator: boolean;
  /**
   * The admin API and console as a fetch handler of their own, for mounting apart from /v1
   * (the request path must start with /admin). `options.admin` mounts them in the gateway.
   */
  adminHandler(options: AdminHttpOptions): (request: Request) => Promise<Response>;
}

export type Gateway = ServerAdapter<GatewayServerContext, ServerAdapterBaseObject<GatewayServerContext> & GatewayExtras>;

/** One request on its way through the pipeline. */
interface Exchange {
  request: Request;
  serverContext: GatewayServerContext | undefined;
  requestId: string;
  path: string;
  query: string;
  /** Headers every answer to this request carries: the request id, then the rate-limit state. */
  headers: Record<string, string>;
  clientIp: string;
  route?: MatchedRoute;
  key?: ApiKeyRecord;
  ctx?: RequestContext;
  observed: Tracked;
  /**
   * Headers the answer gets when it is written (the gateway's node:http bridge writes them in
   * the same writeHead), instead of being set on the Response; null: set them on the Response.
   */
  late: Record<string, string> | null;
}

/** A pipeline stage: answers, or hands the request to the stages after it with `next()`. */
type Stage = (x: Exchange, next: () => Promise<Response>) => Promise<Response> | Response;

interface MatchedRoute {
  /** The route's pattern, e.g. "/v1/videos/{id}": what logs and metrics name it by. */
  name: string;
  handler: RouteHandler;
  params: Record<string, string>;
  idempotent: boolean;
  /** The path after /v1. */
  sub: string;
}

/** Chains the stages, first to last: each stage's `next()` runs the rest. */
function compose(stages: readonly Stage[]): (x: Exchange) => Promise<Response> {
  const at = (i: number, x: Exchange): Promise<Response> => {
    const stage = stages[i];
    if (!stage) return Promise.reject(new Error('the pipeline ended without an answer'));
    try {
      return Promise.resolve(stage(x, () => at(i + 1, x)));
    } catch (err) {
      return Promise.reject(err);
    }
  };
  return (x) => at(0, x);
}

interface Route {
  path: string;
  pattern: RegExp;
  keys: string[];
  methods: Partial<Record<string, RouteHandler>>;
  /** Billable POST: honours Idempotency-Key. */
  idempotent: boolean;
}

function route(path: string, methods: Route['methods'], idempotent = false): Route {
  const keys: string[] = [];
  const pattern = new RegExp(
    // `{id}` is one path segment; `{id...}` takes the rest of the path, slashes included
    // (model ids such as "sim/fast-chat").
    `^${path.replace(/\{(\w+)(\.\.\.)?\}/g, (_, k: string, rest?: string) => {
      keys.push(k);
      return rest ? '(.+)' : '([^/]+)';
    })}$`,
  );
  return { path, pattern, keys, methods, idempotent };
}

/**
 * The per-request context routes see. A class, not an object literal: a literal with a getter
 * is built through a slow path on every request.
 */
class Context implements RequestContext {
  readonly request: Request;
  readonly requestId: string;
  readonly clientIp: string;
  readonly params: Record<string, string>;
  readonly key: ApiKeyRecord;
  readonly observed: Tracked;
  private readonly rawQuery: string;
  private bodyBytes: Promise<Uint8Array> | undefined;

  constructor(
    x: Exchange,
    private readonly maxBodyBytes: number,
    private readonly bodyTimeoutMs: number,
  ) {
    this.request = x.request;
    this.requestId = x.requestId;
    this.clientIp = x.clientIp;
    this.params = x.route!.params;
    this.key = x.key!;
    this.observed = x.observed;
    this.rawQuery = x.query;
  }

  get query(): URLSearchParams {
    return new URLSearchParams(this.rawQuery);
  }

  body(): Promise<Uint8Array> {
    return (this.bodyBytes ??= readBody(this.request, this.maxBodyBytes, this.bodyTimeoutMs));
  }
}

export function createGateway(options: GatewayOptions = {}): Gateway {
  const { stores: givenStores, now: givenNow, logger, basePath = '', plugins = [], ...config } = options;
  const cfg = parseOptions(config);
  const now = givenNow ?? Date.now;
  const log = logger ?? createLogger(cfg.logLevel);
  // Budget alerts are a plugin like any other (onBilled), ahead of the user's.
  const alerts = cfg.alerts ? budgetAlerts(cfg.alerts, () => core) : null;
  const hooks = createHooks(alerts ? [alerts, ...plugins] : plugins, log);
  const shutdown = new AbortController();
  const pending = new Set<Promise<unknown>>();
  const track = (p: Promise<unknown>) => {
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };

  let stores: Stores;
  const storage = cfg.storage;
  if (givenStores) stores = givenStores;
  else if (storage.driver === 'memory') stores = createMemoryStores({ now });
  else if (storage.driver === 'sqlite' && !storage.limits) {
    stores = createSqliteStores({ path: storage.path, synchronous: storage.synchronous, now });
  } else {
    // These connect (and PostgreSQL migrates) asynchronously; createGateway is synchronous.
    const how =
      storage.driver === 'postgres'
        ? 'import { createPostgresStores } from "model-gateway/postgres" and pass `stores: await createPostgresStores({ url, schema })`'
        : storage.driver === 'redis'
          ? 'import { createRedisStores } from "model-gateway/redis" and pass them as `stores`'
          : 'build the stores (model-gateway/sqlite and model-gateway/redis) and pass them as `stores`';
    const what = `storage.driver "${storage.driver}"${'limits' in storage && storage.limits ? ' with limits from Redis' : ''}`;
    throw new GatewayError('internal_error', `${what} needs stores built first: ${how}, or use the CLI.`);
  }

  /** Streams being relayed now (for the open-streams gauge). */
  const counters = { openStreams: 0 };
  const metrics = cfg.metrics
    ? createMetrics(cfg.metrics, {
        circuits: () => [...upstreams.keys()].map((u) => [u, breaker.isOpen(u)] as [string, boolean]),
        openHolds: () => core.meter.openCalls(),
        openStreams: () => counters.openStreams,
      })
    : null;
  // Store latency by operation is measured around every store call when metrics are on.
  if (metrics) stores = metrics.timeStores(stores);
  const observers: Observer[] = [...(cfg.accessLog ? [accessLog(log)] : []), ...(metrics ? [metrics.observer] : []), tracing];

  const tokenizer = createTokenizer();
  const upstreams = new Map<string, Upstream>();
  for (const [name, u] of Object.entries(cfg.upstreams)) {
    if ('call' in u) upstreams.set(name, customUpstream(name, u));
    else upstreams.set(name, 'simulate' in u ? createSimulator(name, u, tokenizer) : createHttpUpstream(name, u));
  }
  const breaker = createBreaker(now);
  const grantsCache = new LRUCache<string, readonly string[]>({ max: 10_000, ttl: 5_000 });

  const core: Services = {
    cfg,
    stores,
    catalog: createCatalog(cfg, { now, serviceName: cfg.serviceName, isUnavailable: (u) => breaker.isOpen(u) }),
    auth: createAuthenticator(stores.keys),
    meter: createMeter({
      billing: stores.billing,
      journal: cfg.settleJournalDir ? fileJournal(cfg.settleJournalDir) : memoryJournal(),
      now,
      log,
      holdTtlMs: cfg.limits.holdTtlMs,
      // A billable request's key-rate check rides on its hold (see the keyRate stage).
      windowsId: stores.limits.windowsId,
      deferredCheck: (holdId) => limiter.take(holdId),
      // Not awaited: a slow plugin never holds up the answer or the next settle.
      onBilled: hooks.has('onBilled') ? (entry) => void hooks.run('onBilled', { entry }) : undefined,
    }),
    tokenizer,
    upstreams,
    breaker,
    now,
    log,
    async grants(accountId) {
      let g = grantsCache.get(accountId);
      if (!g) {
        const account = await stores.accounts.get(accountId);
        g = account?.grants ?? [];
        grantsCache.set(accountId, g);
      }
      return g;
    },
    track,
    runKeyCheck: (requestId) => limiter.runDeferred(requestId),
    hooks,
    counters,
    shutdown: shutdown.signal,
    // Set right below: the job runner needs the rest of the core.
    jobs: undefined as unknown as JobRunner,
    context: createContextService({ cfg, stores }),
  };
  core.jobs = createJobRunner(core);
  core.jobs.onOrphan('image', adoptLostImage(core));
  core.jobs.onOrphan('video', adoptVideo(core));

  const limiter = createLimiter(core);
  const admin = createAdmin(core, { forgetGrants: (id) => grantsCache.delete(id) });
  const ready = Promise.all([seed(core, admin), tokenizer.ready]).then(() => undefined);
  ready.catch((err: unknown) => log.error({ msg: 'seeding failed', err }));
  // Checked per request before awaiting `ready`: an await costs a tick even once it resolved.
  let isReady = false;
  let startup: StartupState = 'pending';
  void ready.then(
    () => {
      isReady = true;
      startup = 'ok';
    },
    () => (startup = 'failed'),
  );
  // Wallets and the ledger live only in the stores: say so at start-up when they keep nothing.
  stores
    .durabilityWarning?.()
    .then((warning) => warning && log.warn({ msg: warning }))
    .catch(() => undefined); // an unreachable store is reported by readiness and by every call
  /** Set by dispose(): new calls are refused while the ones in flight finish. */
  let draining = false;
  /** Requests inside `handle` (streams that outlive it are tracked as open billed calls). */
  let inFlight = 0;
  const probes = createProbes({ stores, startup: () => startup, draining: () => draining, log });
  const cors = createCors(cfg.cors);

  const v1 = `${basePath.replace(/\/+$/, '')}/v1`;
  const v1Slash = `${v1}/`;
  const routes: Route[] = [
    route('/chat/completions', { POST: chatCompletions }, true),
    route('/completions', { POST: createCompletion }, true),
    route('/responses', { POST: createResponse }, true),
    route('/embeddings', { POST: createEmbeddings }, true),
    route('/models', { GET: listModels }),
    route('/models/{id...}', { GET: retrieveModel }),
    route('/key', { GET: readKey }),
    route('/brands', { GET: listBrands }),
    route('/knowledge', { GET: listKnowledge }),
    route('/images/generations', { POST: createImage }, true),
    route('/images/{id}', { GET: (c, x) => getJob(c, x, 'image') }),
    route('/audio/speech', { POST: createSpeech }, true),
    route('/videos', { POST: createVideo, GET: listVideos }, true),
    route('/videos/{id}', { GET: (c, x) => getJob(c, x, 'video'), DELETE: deleteVideo }),
    route('/videos/{id}/content', { GET: videoContent }),
  ];

  const metricsPath = cfg.metrics ? `${basePath.replace(/\/+$/, '')}${cfg.metrics.path}` : null;
  const adminHttp = cfg.admin ? createAdminHttp(core, admin, cfg.admin) : null;
  const adminPath = `${basePath.replace(/\/+$/, '')}/admin`;
  const healthPath = `${basePath.replace(/\/+$/, '')}/health`;
  const readyPath = `${basePath.replace(/\/+$/, '')}/ready`;

  /**
   * The request pipeline, top to bottom. Each stage may answer (return a Response) or pass the
   * request on (`next()`); a stage that wraps `next()` also sees the answer coming back. A
   * thrown error becomes the error envelope in `errorEnvelope`, with the headers gathered so far.
   */
  const stages: Stage[] = [
    // Timing, Server-Timing, and the record the access log, metrics and traces report once the
    // request is over (a stream: when it ended).
    async function observe(x, next) {
      const res = await next();
      const r = x.observed.record;
      r.status = res.status;
      r.respondedMs = performance.now() - r.startedAt;
      const timing = `gateway;dur=${Math.max(0, r.respondedMs - r.upstreamMs).toFixed(1)}, upstream;dur=${r.upstreamMs.toFixed(1)}`;
      if (x.late) x.late['server-timing'] = timing;
      else res.headers.set('server-timing', timing);
      x.observed.release();
      return res;
    },
    // User plugins first and last: onRequest may answer; onResponse sees every answer.
    function userRequestAndResponse(x, next) {
      return hooks.has('onRequest') || hooks.has('onResponse') ? userHooks(x, next) : next();
    },
    function corsHeaders(x, next) {
      if (!cors) return next();
      return cors.preflight(x.request, x.requestId) ?? next().then((res) => cors.decorate(x.request, res));
    },
    async function errorEnvelope(x, next) {
      try {
        const res = await next();
        // Every answer names its request; authenticated ones carry the rate-limit state.
        if (x.late) for (const k in x.headers) x.late[k] = x.headers[k]!;
        else for (const k in x.headers) res.headers.set(k, x.headers[k]!);
        return res;
      } catch (err) {
        if (hooks.has('onError')) await hooks.run('onError', { error: err, requestId: x.requestId });
        const res = toErrorResponse(err, x.requestId, x.headers, x.request.signal?.aborted === true);
        if (err instanceof GatewayError) {
          const r = x.observed.record;
          r.errorCode = err.code;
          const meta = err.metadata as { limit?: unknown; limit_source?: unknown } | undefined;
          const limit = meta?.limit ?? meta?.limit_source;
          if (typeof limit === 'string') r.limit = limit;
        }
        return res;
      }
    },
    // Liveness and readiness answer while seeding runs, without a key and outside every limit.
    function probesOutsideV1(x, next) {
      if (x.path === healthPath) return probes.answer('health', x.request, x.requestId);
      if (x.path === readyPath) return probes.answer('ready', x.request, x.requestId);
      if (metrics && x.path === metricsPath) return metrics.answer(x.request, x.requestId);
      return next();
    },
    // The admin API and console (when configured): operators only, outside /v1 and its limits.
    function adminApi(x, next) {
      if (!adminHttp || !(x.path === adminPath || x.path.startsWith(`${adminPath}/`))) return next();
      const admin = adminHttp;
      const answer = () => admin.handle(x.request, x.path.slice(basePath.replace(/\/+$/, '').length), x.query, x.requestId);
      return isReady ? answer() : ready.then(answer);
    },
    function startupAndShutdown(x, next): Promise<Response> | Response {
      // Once seeded, no await: a settled promise still costs a turn of the microtask queue.
      if (!isReady) return ready.then(() => startupAndShutdown(x, next));
      if (!x.path.startsWith(v1Slash)) throw new GatewayError('not_found', `Unknown route ${x.request.method} ${x.path.slice(0, 200)}.`);
      if (draining) {
        throw new GatewayError('service_unavailable', 'The gateway is shutting down. Retry the request.', {
          headers: { 'retry-after': '1', connection: 'close' },
        });
      }
      return next();
    },
    // Every /v1 request counts against its IP before anything else is looked at.
    function ipThrottle(x, next) {
      const peer = x.serverContext?.clientAddress ?? x.serverContext?.req?.socket?.remoteAddress ?? '0.0.0.0';
      x.clientIp = limiter.clientAddress(peer, x.request.headers.get('x-forwarded-for'));
      const counted = limiter.checkIp(x.clientIp);
      return counted ? counted.then(next) : next();
    },
    function routing(x, next) {
      x.route = matchRoute(x.path.slice(v1.length), x.request.method, x.path);
      x.observed.record.route = x.route.name;
      return next();
    },
    function authentication(x, next) {
      const key = core.auth.authenticate(x.request.headers.get('authorization'));
      // A cached key is answered synchronously: no await, no microtask turn.
      return typeof (key as Partial<Promise<ApiKeyRecord>>).then === 'function'
        ? (key as Promise<ApiKeyRecord>).then((k) => authenticated(x, k, next))
        : authenticated(x, key as ApiKeyRecord, next);
    },
    // A billable POST counts against its key in the same store step as its hold (one step
    // fewer per call); the limiter still answers 429 before any other answer it would get.
    // Every other request is counted here, before its route runs.
    async function keyRate(x, next) {
      if (x.route!.idempotent && x.request.method === 'POST') return limiter.deferKey(x.requestId, x.key!, x.headers, next);
      Object.assign(x.headers, await limiter.checkKey(x.key!));
      return next();
    },
    function idempotency(x, next) {
      const route = x.route!;
      return route.idempotent && x.request.method === 'POST' ? withIdempotency(stores.idempotency, contextOf(x), route.sub, next) : next();
    },
    function routeHandler(x) {
      return x.route!.handler(core, contextOf(x));
    },
  ];
  const pipeline = compose(stages);

  /** The request's key is known: recorded, then the plugins' onAuthenticated, then the rest. */
  function authenticated(x: Exchange, key: ApiKeyRecord, next: () => Promise<Response>): Promise<Response> {
    x.key = key;
    x.observed.record.keyId = key.id;
    x.observed.record.account = key.accountId;
    if (!hooks.has('onAuthenticated')) return next();
    return hooks
      .run('onAuthenticated', { request: x.request, requestId: x.requestId, key: pluginKey(key), account: key.accountId })
      .then(next);
  }

  /** The user plugins' onRequest (which may answer) and onResponse (which sees every answer). */
  async function userHooks(x: Exchange, next: () => Promise<Response>): Promise<Response> {
    let res: Response | undefined;
    if (hooks.has('onRequest')) {
      await hooks.run('onRequest', { request: x.request, requestId: x.requestId, setResponse: (r) => void (res = r) });
    }
    res ??= await next();
    if (hooks.has('onResponse')) {
      await hooks.run('onResponse', { request: x.request, requestId: x.requestId, response: res, setResponse: (r) => void (res = r) });
    }
    return res;
  }

  /** The route for `sub` (the path after /v1), or 404 / 405 with Allow. */
  function matchRoute(sub: string, method: string, path: string): MatchedRoute {
    for (const r of routes) {
      const m = r.pattern.exec(sub);
      if (!m) continue;
      // Own properties only: a method named "constructor" or "__proto__" is not a handler.
      const handler = Object.hasOwn(r.methods, method) ? r.methods[method] : undefined;
      if (!handler) {
        throw new GatewayError('method_not_allowed', `Method ${method} is not allowed on ${path}.`, {
          headers: { allow: Object.keys(r.methods).join(', ') },
        });
      }
      const params: Record<string, string> = {};
      r.keys.forEach((k, i) => {
        const raw = m[i + 1] ?? '';
        // A malformed escape ("%zz") names nothing that exists: keep it raw, so the route
        // answers its own 404 instead of a URIError turning into a 500.
        try {
          params[k] = decodeURIComponent(raw);
        } catch {
          params[k] = raw;
        }
      });
      return { name: `/v1${r.path}`, handler, params, idempotent: r.idempotent, sub };
    }
    throw new GatewayError('not_found', `Unknown route ${method} ${path.slice(0, 200)}.`);
  }

  /** The per-request context routes see, built once. */
  function contextOf(x: Exchange): RequestContext {
    return (x.ctx ??= new Context(x, cfg.limits.maxBodyBytes, cfg.limits.bodyTimeoutMs));
  }

  /**
   * Runs one request through the pipeline. `late`: where the answer's gateway headers go when
   * the caller writes them itself (the node:http bridge); without it they are set on the Response.
   */
  async function handle(request: Request, serverContext: GatewayServerContext, late: Record<string, string> | null = null): Promise<Response> {
    const requestId = newRequestId();
    const { path, query } = requestTarget(request, serverContext);
    // Until routing names it: the probes by their path, anything else as unmatched (a label
    // per unknown path would let any client grow the metrics without bound).
    const routeName = path === healthPath || path === readyPath || path === metricsPath ? path : 'unmatched';
    const record = newRecord(requestId, request.method, routeName, startRequestSpan(request.method));
    const observed = trackRecord(record, observers, (err) => log.error({ msg: 'an observer failed', requestId, err: String(err) }));
    const x: Exchange = { request, serverContext, requestId, path, query, headers: { 'x-request-id': requestId }, clientIp: '', observed, late };
    inFlight++;
    try {
      return await pipeline(x);
    } finally {
      inFlight--;
    }
  }

  /**
   * Graceful shutdown: refuse new calls, give those in flight (streams included) the grace
   * period to finish, then cut what is left, billing what it produced.
   */
  async function drain(): Promise<void> {
    draining = true;
    const deadline = Date.now() + cfg.shutdownGraceMs;
    while (inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    if (await core.meter.idle(Math.max(0, deadline - Date.now()))) return;
    log.warn({ msg: 'shutdown grace period over; cutting the calls still open', open: core.meter.openCalls() });
    core.meter.abortAll();
    await core.meter.idle(1_000);
  }

  function toErrorResponse(err: unknown, requestId: string, extra: Record<string, string>, clientGone: boolean): Response {
    let gErr: GatewayError;
    if (err instanceof GatewayError) gErr = err;
    else if (isStoreUnavailable(err)) {
      log.warn({ msg: 'store unavailable', requestId, err: err.message });
      gErr = errors.storeDown(err);
    } else if (clientGone) {
      // The client went away mid-request; nobody will read this answer.
      gErr = new GatewayError('invalid_request', 'The client closed the request.', { status: 499 });
    } else {
      log.error({ msg: 'unexpected error', requestId, err });
      gErr = new GatewayError('internal_error', `Internal error. Quote request id ${requestId} when reporting it.`);
    }
    return errorResponse(gErr, requestId, extra);
  }

  const base: ServerAdapterBaseObject<GatewayServerContext> & GatewayExtras = {
    handle: handle as ServerAdapterBaseObject<GatewayServerContext>['handle'],
    ready,
    admin,
    config: cfg,
    usesSimulator: [...upstreams.values()].some((u) => u.simulated),
    adminHandler(options) {
      const http = createAdminHttp(core, admin, options);
      return async (request) => {
        await ready;
        const { path, query } = requestTarget(request, undefined);
        return http.handle(request, path, query, newRequestId());
      };
    },
  };
  const adapter = createServerAdapter<GatewayServerContext, typeof base>(base, {
    plugins: [
      {
        async onDispose() {
          await drain();
          await hooks.run('onDispose');
          shutdown.abort();
          core.jobs.dispose();
          await Promise.allSettled([...pending]);
          await core.meter.dispose();
          await Promise.allSettled([...upstreams.values()].map((u) => u.close()));
          if (!givenStores) await stores.close();
          flushLogger(log);
        },
      },
    ],
  });

  // The gateway's own node:http bridge (see src/http/node-lane.ts) takes /v1 requests handed
  // over as node's (request, response) pair, unless a plugin is to see the request: a plugin
  // gets the adapter's full Request.
  const laneOpen = !(['onRequest', 'onResponse', 'onAuthenticated', 'onUpstreamRequest'] as const).some((h) => hooks.has(h));
  function nodeLane(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const late: Record<string, string> = {};
    return handle(new NodeRequest(req, res) as unknown as Request, { req }, late)
      .catch((err: unknown) => {
        log.error({ msg: 'unexpected error', err });
        return errorResponse(new GatewayError('internal_error', 'Internal error.'), late['x-request-id'] ?? 'unknown');
      })
      .then((response) => writeAnswer(req, res, response, late))
      .catch((err: unknown) => {
        // No answer can be sent now (its head may be out already): end the exchange.
        log.error({ msg: 'writing an answer failed', err: String(err) });
        res.destroy(err instanceof Error ? err : new Error(String(err)));
      });
  }
  return new Proxy(adapter, {
    // EventEmitter calls a listener as `listener.apply(server, args)`: the adapter's own proxy
    // would hand out an `apply` bound to its handler, past this proxy's apply trap.
    get(target, prop, receiver) {
      if (prop === 'apply' || prop === 'call' || prop === 'bind') return Function.prototype[prop];
      return Reflect.get(target, prop, receiver);
    },
    apply(target, thisArg, args: unknown[]) {
      const [req, res] = args;
      if (laneOpen && args.length === 2 && isNodeExchange(req, res) && req.url?.startsWith(v1Slash)) return nodeLane(req, res as ServerResponse);
      return Reflect.apply(target, thisArg, args);
    },
  });
}

/**
 * Whether a call's arguments are node:http's HTTP/1 request, its body still unread, and its
 * response (not a framework's next(), HTTP/2's compatibility objects, or a request whose body
 * a middleware already read into `req.body`: the adapter takes those).
 */
function isNodeExchange(req: unknown, res: unknown): req is IncomingMessage & { url?: string } {
  const r = req as (Partial<IncomingMessage> & { body?: unknown }) | null;
  const w = res as Partial<ServerResponse> | null;
  return (
    typeof r === 'object' &&
    r !== null &&
    typeof r.on === 'function' &&
    typeof r.read === 'function' &&
    typeof r.headers === 'object' &&
    r.httpVersionMajor === 1 &&
    r.body === undefined &&
    r.readableEnded === false &&
    typeof w === 'object' &&
    w !== null &&
    typeof w.writeHead === 'function' &&
    typeof w.end === 'function'
  );
}
