/** What the routes share: the parts created by `createGateway`, and the per-request context. */
import type { Authenticator } from './auth/keys.js';
import type { Meter } from './billing/meter.js';
import type { Tokenizer } from './billing/tokens.js';
import type { Catalog } from './catalog/catalog.js';
import type { Logger } from './observability/log.js';
import type { GatewayConfig } from './options.js';
import type { ApiKeyRecord, Stores } from './stores/types.js';
import type { Upstream } from './upstream/client.js';
import type { Breaker } from './upstream/breaker.js';
import type { JobRunner } from './jobs/runner.js';
import type { ContextService } from './context/inject.js';
import type { Hooks } from './pipeline/hooks.js';
import type { Tracked } from './observability/record.js';

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
  context: ContextService;
  now: () => number;
  log: Logger;
  /** Grants of an account ("Contact sales" models), cached briefly. */
  grants(accountId: string): Promise<readonly string[]>;
  /** Registers background work that `dispose()` waits for. */
  track(p: Promise<unknown>): void;
  /**
   * Runs the request's key-rate check now if it still waits for the request's hold: a route
   * that takes an in-flight slot before its hold calls it first, so a limited key gets its
   * 429 without ever taking a slot.
   */
  runKeyCheck(requestId: string): Promise<void>;
  /** The user plugins' hooks the routes run (onUpstreamRequest; onError for failed streams). */
  hooks: Hooks;
  /** Live counts the metrics read. */
  counters: { openStreams: number };
  /** Aborted by dispose(): long-running background work stops. */
  shutdown: AbortSignal;
}

export interface RequestContext {
  request: Request;
  requestId: string;
  clientIp: string;
  /** Route parameters, e.g. { id } of /videos/{id}. */
  params: Record<string, string>;
  query: URLSearchParams;
  key: ApiKeyRecord;
  /** What is observed of this request (access log, metrics, traces); streams hold it open. */
  observed: Tracked;
  /** The request body, read once within the body limits (413 / 408 otherwise). */
  body(): Promise<Uint8Array>;
}

export type RouteHandler = (core: Services, ctx: RequestContext) => Promise<Response>;
