/**
 * createGateway(options) -> a @whatwg-node/server adapter: mount it on node:http as is, call
 * `.fetch(Request)` in tests, `dispose()` to release everything. It composes; the parts
 * implement: the services (services.ts), then one ordered list of pipeline stages, each a
 * small plugin of its own (src/pipeline/plugins/), ending in the declared operation.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServerAdapter, type ServerAdapter, type ServerAdapterBaseObject } from '@whatwg-node/server';
import { type Admin, createAdmin } from './admin/accounts.js';
import { seedUntilStored } from './admin/seed.js';
import { errorResponse, errors } from './errors.js';
import { budgetAlerts } from './alerts/alerts.js';
import { type AdminHttpOptions, createAdminHttp } from './admin/http.js';
import { withNodeBridge } from './http/node-bridge.js';
import { newRequestId } from './http/request-id.js';
import { requestTarget } from './http/target.js';
import { flushLogger } from './observability/logs.js';
import { newRecord, track as trackRecord } from './observability/record.js';
import { startRequestSpan } from './observability/traces.js';
import { adoptLostImage } from './operations/images.js';
import { operations } from './operations/index.js';
import { createBatchRunner } from './operations/batches/runner.js';
import { adoptVideo } from './operations/videos/adopt.js';
import type { parseOptions } from './options.js';
import { compose } from './pipeline/compose.js';
import { contextOf } from './pipeline/context.js';
import { adminMount } from './pipeline/plugins/admin-mount.js';
import { auth } from './pipeline/plugins/auth.js';
import { corsStage, createCors } from './pipeline/plugins/cors.js';
import { drain } from './pipeline/plugins/drain.js';
import { asGatewayError, errorEnvelope } from './pipeline/plugins/error-envelope.js';
import { idempotency } from './pipeline/plugins/idempotency.js';
import { ipLimit } from './pipeline/plugins/ip-limit.js';
import { keyLimit } from './pipeline/plugins/key-limit.js';
import { observe } from './pipeline/plugins/observe.js';
import { createProbes, probesStage, type StartupState } from './pipeline/plugins/probes.js';
import { matchRoute, route } from './pipeline/plugins/route.js';
import { userHooks } from './pipeline/plugins/user-hooks.js';
import { createRouter } from './pipeline/router.js';
import type { Exchange, GatewayServerContext } from './pipeline/types.js';
import { createServices, type Services, type ServicesOptions } from './services.js';

export type { GatewayServerContext } from './pipeline/types.js';

export type GatewayOptions = ServicesOptions & {
  /** Path prefix in front of /v1 when the host app does not strip it (e.g. "/api"). */
  basePath?: string;
};

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

/**
 * What `createGateway` returns: a node:http request listener (`createServer(gateway)`) and a
 * fetch handler, with the gateway's own parts. Typed here rather than as the server adapter's
 * own type, whose declarations name globals (DisposableStack, URLPattern) that a TypeScript
 * project on Node's types lacks: an app type-checks against this package without skipLibCheck.
 */
export interface Gateway extends GatewayExtras {
  /** Serves one node:http request (resolves once the answer is written). */
  (req: IncomingMessage, res: ServerResponse): Promise<void>;
  /** Serves one fetch Request: what tests, Bun and the framework adapters call. */
  fetch(request: Request, serverContext?: Partial<GatewayServerContext>): Promise<Response> | Response;
  /** Ends the gateway: calls in flight get the grace period, then its background work and stores stop. */
  dispose(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The server adapter as made, before it is typed as a Gateway. */
type Adapter = ServerAdapter<GatewayServerContext, ServerAdapterBaseObject<GatewayServerContext> & GatewayExtras>;

export function createGateway(options: GatewayOptions = {}): Gateway {
  const { basePath: givenBase = '', ...rest } = options;
  const base = givenBase.replace(/\/+$/, '');
  // Budget alerts are a plugin like any other (onBilled), ahead of the user's.
  const built = createServices(rest, (cfg, services) => (cfg.alerts ? [budgetAlerts(cfg.alerts, services)] : []));
  const { services: core, limiter, metrics } = built;
  const { cfg, log, hooks } = core;
  core.jobs.onOrphan('image', adoptLostImage(core));
  core.jobs.onOrphan('video', adoptVideo(core));
  core.batches = createBatchRunner(core);
  const admin = createAdmin(core, { forgetGrants: built.forgetGrants });
  // A store down at start: seeding tries again until it answers, calls get 503 meanwhile.
  const seeding = seedUntilStored(core, admin, () => draining);
  const { ready } = seeding;
  ready.catch((err: unknown) => log.error({ msg: 'seeding failed', err }));
  const paths = { v1: `${base}/v1`, health: `${base}/health`, ready: `${base}/ready`, metrics: cfg.metrics ? `${base}${cfg.metrics.path}` : null };
  let isReady = false;
  let startup: StartupState = 'pending';
  void ready.then(
    () => {
      isReady = true;
      startup = 'ok';
    },
    () => void (startup = 'failed'),
  );
  /** Set by dispose(): new calls are refused while the ones in flight finish. */
  let draining = false;
  /** Requests inside `handle` (streams that outlive it are tracked as open billed calls). */
  let inFlight = 0;
  /**
   * Answers a framework adapter is still writing to its client (Express, Fastify): a stream's
   * last frames are written after its call has closed, so shutdown waits for them too.
   */
  const adapterWrites = new Set<Promise<unknown>>();
  const adminHttp = cfg.admin ? createAdminHttp(core, admin, cfg.admin) : null;
  const ctx = (x: Exchange) => contextOf(x, cfg.limits.maxBodyBytes, cfg.limits.bodyTimeoutMs);

  /** The error shape a path's clients read: Anthropic's on the Messages API. */
  const shapeOf = (path: string) => (path === `${paths.v1}/messages` || path.startsWith(`${paths.v1}/messages/`) ? 'anthropic' : 'openai');
  // The request's way, top to bottom; each stage answers or hands on with next(). User plugins'
  // onRequest / onResponse wrap everything after the timing; the other hooks run at their stage.
  const pipeline = compose([
    observe,
    userHooks(hooks),
    corsStage(createCors(cfg.cors), paths.v1),
    errorEnvelope(hooks, log, shapeOf),
    probesStage(paths, createProbes({ stores: core.stores, startup: () => startup, draining: () => draining, log }), metrics),
    adminMount(adminHttp && { adminPath: `${base}/admin`, basePath: base, handle: adminHttp.handle }, () =>
      isReady || seeding.seeded() ? null : seeding.storeDown() ? Promise.reject(errors.storeDown()) : seeding.attempt().then(() => {
        if (!seeding.seeded()) throw errors.storeDown();
      }),
    ),
    // Named before any refusal, so every refusal's access line and metrics name the route.
    matchRoute(createRouter(operations), paths.v1, core),
    drain(
      { ready, isReady: () => isReady || seeding.seeded(), storeDown: seeding.storeDown, attempt: seeding.attempt, draining: () => draining },
      `${paths.v1}/`,
    ),
    ipLimit(limiter),
    route,
    auth(core.auth, hooks),
    keyLimit(limiter),
    idempotency(core.stores.idempotency, ctx, paths.v1, { lockTtlMs: cfg.limits.idempotencyLockTtlMs, ...cfg.idempotency, log: (msg) => log.warn({ msg }) }),
    (x) => x.route!.run(ctx(x)),
  ]);

  /** Runs one request; `late`: where the answer's headers go when the caller writes them itself. */
  async function handle(request: Request, serverContext: GatewayServerContext, late: Record<string, string> | null = null): Promise<Response> {
    const requestId = newRequestId();
    const { path, query } = requestTarget(request, serverContext);
    // Until routing names it: the probes by their path, anything else as unmatched (a label
    // per unknown path would let any client grow the metrics without bound).
    const routeName = path === paths.health || path === paths.ready || path === paths.metrics ? path : 'unmatched';
    const record = newRecord(requestId, request.method, routeName, startRequestSpan(request.method));
    const observed = trackRecord(record, built.observers, (err) => log.error({ msg: 'an observer failed', request_id: requestId, err: String(err) }));
    const x: Exchange = { request, serverContext, requestId, path, query, headers: { 'x-request-id': requestId }, clientIp: '', keyCheck: null, observed, late };
    inFlight++;
    try {
      return await pipeline(x);
    } catch (err) {
      // Past the error envelope (a stage before it failed): still the one envelope, masked
      // and logged, never the server's own page with a stack trace.
      const gErr = asGatewayError(err, requestId, request.signal?.aborted === true, log);
      record.errorCode = gErr.code;
      return errorResponse(gErr, requestId, x.headers, shapeOf(path));
    } finally {
      inFlight--;
    }
  }

  const extras = extrasOf(core, admin, ready, handle);
  const adapter = createServerAdapter<GatewayServerContext, typeof extras>(extras, {
    plugins: [
      {
        async onDispose() {
          draining = true;
          // One grace period for everything in flight, at once: a batch stops starting lines
          // now, and the lines it runs get the grace the calls get, not one after theirs.
          built.beginShutdown();
          await finishCalls(core, () => inFlight, built.cut);
          await writesDone(adapterWrites, ADAPTER_WRITES_WAIT_MS);
          await hooks.run('onDispose');
          await built.stopBackground();
          await core.meter.dispose();
          await Promise.allSettled([...core.upstreams.values()].map((u) => u.close()));
          if (built.ownsStores) await core.stores.close();
          flushLogger(log);
        },
      },
    ],
  });
  // A plugin that is to see the request gets the adapter's full Request; otherwise node:http's
  // /v1 exchanges take the gateway's own bridge.
  const pluginsSee = (['onRequest', 'onResponse', 'onAuthenticated', 'onUpstreamRequest'] as const).some((h) => hooks.has(h));
  const gateway: Adapter = pluginsSee ? adapter : withNodeBridge(adapter, handle, `${paths.v1}/`, log);
  // Found by a global symbol: an adapter bundled apart from this module still finds it.
  Object.defineProperty(gateway, ADAPTER_WRITES, { value: adapterWrites });
  return gateway as unknown as Gateway;
}

/** Where a gateway keeps the answers its framework adapters are writing (adapters/internal/node.ts adds them). */
const ADAPTER_WRITES = Symbol.for('model-gateway.adapterWrites');
/** How long shutdown waits for adapters to write the answers whose calls have ended: their last frames. */
const ADAPTER_WRITES_WAIT_MS = 2_000;

/** Waits for `writes` to settle, at most `ms`. */
async function writesDone(writes: Set<Promise<unknown>>, ms: number): Promise<void> {
  if (writes.size === 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.allSettled([...writes]), new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

/** Shutdown: give the calls in flight the grace period to finish, then cut what is left (billing what it produced). */
async function finishCalls(core: Services, inFlight: () => number, cut: () => void): Promise<void> {
  const deadline = Date.now() + core.cfg.shutdownGraceMs;
  while (inFlight() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  if (await core.meter.idle(Math.max(0, deadline - Date.now()))) return;
  core.log.warn({ msg: 'shutdown grace period over; cutting the calls still open', open: core.meter.openCalls() });
  cut();
  core.meter.abortAll();
  await core.meter.idle(1_000);
}

/** What the gateway object carries beside the server adapter's own. */
function extrasOf(
  core: Services,
  admin: Admin,
  ready: Promise<void>,
  handle: (request: Request, serverContext: GatewayServerContext) => Promise<Response>,
): ServerAdapterBaseObject<GatewayServerContext> & GatewayExtras {
  return {
    handle: handle as ServerAdapterBaseObject<GatewayServerContext>['handle'],
    ready,
    admin,
    config: core.cfg,
    usesSimulator: [...core.upstreams.values()].some((u) => u.simulated),
    adminHandler(adminOptions) {
      const http = createAdminHttp(core, admin, adminOptions);
      return async (request) => {
        await ready;
        const { path, query } = requestTarget(request, undefined);
        return http.handle(request, path, query, newRequestId());
      };
    },
  };
}
