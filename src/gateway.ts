/**
 * createGateway(options) -> a @whatwg-node/server adapter: mount it on node:http as is, call
 * `.fetch(Request)` in tests, `dispose()` to release everything. The route table and the
 * order of checks (IP throttle, then auth, then the key's rate) live here.
 */
import { randomUUID } from 'node:crypto';
import { createServerAdapter, type ServerAdapter, type ServerAdapterBaseObject } from '@whatwg-node/server';
import { LRUCache } from 'lru-cache';
import { createAdmin, seed, type Admin } from './admin.js';
import { createAuthenticator } from './auth/keys.js';
import { fileJournal, memoryJournal } from './billing/journal.js';
import { createMeter } from './billing/meter.js';
import { createTokenizer } from './billing/tokens.js';
import { createCatalog } from './catalog/catalog.js';
import type { Core, RequestContext, RouteHandler } from './core.js';
import { GatewayError, errorResponse, errors } from './errors.js';
import { readBody } from './http/body.js';
import { withIdempotency } from './idempotency.js';
import { createLimiter } from './limits/limiter.js';
import { consoleLogger, type Logger } from './log.js';
import { parseOptions, type GatewayConfigInput } from './options.js';
import { chatCompletions } from './routes/chat.js';
import { listBrands, listKnowledge, listModels, readKey } from './routes/discovery.js';
import { adoptLostImage, createImage } from './routes/images.js';
import { getJob } from './routes/media.js';
import { createSpeech } from './routes/speech.js';
import { adoptVideo } from './routes/videos/adopt.js';
import { videoContent } from './routes/videos/content.js';
import { createVideo } from './routes/videos/create.js';
import { createJobRunner, type JobRunner } from './jobs/runner.js';
import { createContextService } from './context/inject.js';
import { createCors } from './cors.js';
import { createProbes, type StartupState } from './probes.js';
import { createMemoryStores } from './stores/memory/index.js';
import { isStoreUnavailable } from './stores/errors.js';
import type { Stores } from './stores/types.js';
import { createBreaker } from './upstream/breaker.js';
import { createHttpUpstream, type Upstream } from './upstream/client.js';
import { createSimulator } from './upstream/simulator.js';

export interface GatewayOptions extends GatewayConfigInput {
  /** Stores to use instead of the ones `storage` describes (e.g. a Redis store you built). */
  stores?: Stores;
  /** The clock (unix ms). Tests inject one; defaults to Date.now. */
  now?: () => number;
  logger?: Logger;
  /** Path prefix in front of /v1 when the host app does not strip it (e.g. "/api"). */
  basePath?: string;
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
}

export type Gateway = ServerAdapter<GatewayServerContext, ServerAdapterBaseObject<GatewayServerContext> & GatewayExtras>;

interface Route {
  pattern: RegExp;
  keys: string[];
  methods: Partial<Record<string, RouteHandler>>;
  /** Billable POST: honours Idempotency-Key. */
  idempotent: boolean;
}

function route(path: string, methods: Route['methods'], idempotent = false): Route {
  const keys: string[] = [];
  const pattern = new RegExp(
    `^${path.replace(/\{(\w+)\}/g, (_, k: string) => {
      keys.push(k);
      return '([^/]+)';
    })}$`,
  );
  return { pattern, keys, methods, idempotent };
}

export function createGateway(options: GatewayOptions = {}): Gateway {
  const { stores: givenStores, now: givenNow, logger, basePath = '', ...config } = options;
  const cfg = parseOptions(config);
  const now = givenNow ?? Date.now;
  const log = logger ?? consoleLogger();
  const shutdown = new AbortController();
  const pending = new Set<Promise<unknown>>();
  const track = (p: Promise<unknown>) => {
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };

  let stores: Stores;
  if (givenStores) stores = givenStores;
  else if (cfg.storage.driver === 'memory') stores = createMemoryStores({ now });
  else {
    throw new GatewayError(
      'internal_error',
      'storage.driver "redis" needs the Redis stores: import { createRedisStores } from "model-gateway/redis" and pass them as `stores`, or use the CLI.',
    );
  }

  const tokenizer = createTokenizer();
  const upstreams = new Map<string, Upstream>();
  for (const [name, u] of Object.entries(cfg.upstreams)) {
    upstreams.set(name, 'simulate' in u ? createSimulator(name, u, tokenizer) : createHttpUpstream(name, u));
  }
  const breaker = createBreaker(now);
  const grantsCache = new LRUCache<string, readonly string[]>({ max: 10_000, ttl: 5_000 });

  const core: Core = {
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
    route('/models', { GET: listModels }),
    route('/key', { GET: readKey }),
    route('/brands', { GET: listBrands }),
    route('/knowledge', { GET: listKnowledge }),
    route('/images/generations', { POST: createImage }, true),
    route('/images/{id}', { GET: (c, x) => getJob(c, x, 'image') }),
    route('/audio/speech', { POST: createSpeech }, true),
    route('/videos', { POST: createVideo }, true),
    route('/videos/{id}', { GET: (c, x) => getJob(c, x, 'video') }),
    route('/videos/{id}/content', { GET: videoContent }),
  ];

  const healthPath = `${basePath.replace(/\/+$/, '')}/health`;
  const readyPath = `${basePath.replace(/\/+$/, '')}/ready`;

  async function handle(request: Request, serverContext: GatewayServerContext): Promise<Response> {
    // randomUUID draws from a cached entropy pool: far cheaper per request than randomBytes.
    const requestId = `req_${randomUUID().replaceAll('-', '')}`;
    const res = await dispatch(request, serverContext, requestId);
    return cors ? cors.decorate(request, res) : res;
  }

  async function dispatch(request: Request, serverContext: GatewayServerContext, requestId: string): Promise<Response> {
    let rateHeaders: Record<string, string> = {};
    inFlight++;
    try {
      const { path, query } = requestTarget(request, serverContext);
      const preflight = cors?.preflight(request, requestId);
      if (preflight) return preflight;
      // Before waiting for start-up: liveness and readiness answer while seeding runs.
      if (path === healthPath) return await probes.answer('health', request, requestId);
      if (path === readyPath) return await probes.answer('ready', request, requestId);
      if (!isReady) await ready;
      if (!path.startsWith(v1Slash)) throw new GatewayError('not_found', `Unknown route ${request.method} ${path.slice(0, 200)}.`);
      if (draining) {
        throw new GatewayError('service_unavailable', 'The gateway is shutting down. Retry the request.', {
          headers: { 'retry-after': '1', connection: 'close' },
        });
      }

      const peer = serverContext?.clientAddress ?? serverContext?.req?.socket?.remoteAddress ?? '0.0.0.0';
      const clientIp = limiter.clientAddress(peer, request.headers.get('x-forwarded-for'));
      await limiter.checkIp(clientIp);

      const sub = path.slice(v1.length);
      let matched: Route | undefined;
      let m: RegExpExecArray | null = null;
      for (const r of routes) {
        m = r.pattern.exec(sub);
        if (m) {
          matched = r;
          break;
        }
      }
      if (!matched || !m) throw new GatewayError('not_found', `Unknown route ${request.method} ${path.slice(0, 200)}.`);
      // Own properties only: a method named "constructor" or "__proto__" is not a handler.
      const handler = Object.hasOwn(matched.methods, request.method) ? matched.methods[request.method] : undefined;
      if (!handler) {
        throw new GatewayError('method_not_allowed', `Method ${request.method} is not allowed on ${path}.`, {
          headers: { allow: Object.keys(matched.methods).join(', ') },
        });
      }
      const params: Record<string, string> = {};
      matched.keys.forEach((k, i) => {
        const raw = m![i + 1] ?? '';
        // A malformed escape ("%zz") names nothing that exists: keep it raw, so the route
        // answers its own 404 instead of a URIError turning into a 500.
        try {
          params[k] = decodeURIComponent(raw);
        } catch {
          params[k] = raw;
        }
      });

      const key = await core.auth.authenticate(request.headers.get('authorization'));
      rateHeaders = { 'x-request-id': requestId, ...(await limiter.checkKey(key)) };
      let bodyBytes: Promise<Uint8Array> | undefined;
      const ctx: RequestContext = {
        request,
        requestId,
        clientIp,
        params,
        get query() {
          return new URLSearchParams(query);
        },
        key,
        headers: rateHeaders,
        body: () => (bodyBytes ??= readBody(request, cfg.limits.maxBodyBytes, cfg.limits.bodyTimeoutMs)),
      };
      const res =
        matched.idempotent && request.method === 'POST'
          ? await withIdempotency(stores.idempotency, ctx, sub, () => handler(core, ctx))
          : await handler(core, ctx);
      return res;
    } catch (err) {
      return toErrorResponse(err, requestId, rateHeaders, request.signal?.aborted === true);
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
  };
  return createServerAdapter<GatewayServerContext, typeof base>(base, {
    plugins: [
      {
        async onDispose() {
          await drain();
          shutdown.abort();
          core.jobs.dispose();
          await Promise.allSettled([...pending]);
          await core.meter.dispose();
          await Promise.allSettled([...upstreams.values()].map((u) => u.close()));
          if (!givenStores) await stores.close();
        },
      },
    ],
  });
}
