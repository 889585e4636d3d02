/**
 * What travels with one request down the pipeline: the exchange the built-in stages fill in
 * (its path, client address, route, key, the headers every answer carries) and the context
 * an operation sees. State travels here, never through a map keyed by request id.
 */
import type { DeferredCheck } from '../billing/meter.js';
import type { Tracked } from '../observability/record.js';
import type { ApiKeyRecord } from '../stores/types.js';

/** What the server context may carry: node:http's req, or an adapter's client address. */
export interface GatewayServerContext {
  /**
   * node:http's request: its `url` is the request target exactly as the client sent it
   * (`originalUrl` when a framework that strips mount paths handed it over).
   */
  req?: { url?: string | undefined; originalUrl?: string | undefined; socket?: { remoteAddress?: string | undefined } };
  clientAddress?: string;
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
  /** Headers every answer to this request carries (the rate-limit state); a check may add its own. */
  headers: Record<string, string>;
  /** The request body, read once within the body limits (413 / 408 otherwise). */
  body(): Promise<Uint8Array>;
  /**
   * Lets go of the body once nothing will read it again (a stream's upstream request is out):
   * a long stream then does not keep the client's prompt alive. `body()` rejects after it.
   */
  releaseBody(): void;
  /**
   * The key-rate check deferred to this request's hold, taken by whoever runs it (the hold
   * counts it in the same store step when it can). Null once taken, or when not deferred.
   */
  takeKeyCheck(): DeferredCheck | null;
  /**
   * Runs the deferred key-rate check now, if it still waits: an operation that takes an
   * in-flight slot before its hold calls it first, so a limited key gets its 429 without
   * ever taking a slot.
   */
  runKeyCheck(): Promise<void>;
}

/** The route a request matched: its operation to run, its parameters, and the name logs use. */
export interface MatchedRoute {
  /** The route's pattern, e.g. "/v1/videos/{id}": what logs and metrics name it by. */
  name: string;
  params: Record<string, string>;
  /** A billable POST: Idempotency-Key is honoured, and the key's rate check rides on the hold. */
  idempotent: boolean;
  run(ctx: RequestContext): Promise<Response>;
}

/** One request on its way through the pipeline. */
export interface Exchange {
  request: Request;
  serverContext: GatewayServerContext | undefined;
  requestId: string;
  path: string;
  query: string;
  /** Headers every answer to this request carries: the request id, then the rate-limit state. */
  headers: Record<string, string>;
  clientIp: string;
  route?: MatchedRoute;
  /**
   * The answer for a /v1 path that matched no operation (404, or 405 for another method),
   * found before the IP throttle and given after it: the throttle counts unknown paths too.
   */
  refusal?: Error;
  key?: ApiKeyRecord;
  /** The key-rate check deferred to the request's hold (see RequestContext.takeKeyCheck). */
  keyCheck: DeferredCheck | null;
  ctx?: RequestContext;
  observed: Tracked;
  /**
   * Headers the answer gets when it is written (the gateway's node:http bridge writes them in
   * the same writeHead), instead of being set on the Response; null: set them on the Response.
   */
  late: Record<string, string> | null;
}

/** A pipeline stage: answers, or hands the request to the stages after it with `next()`. */
export type Stage = (x: Exchange, next: () => Promise<Response>) => Promise<Response> | Response;
