/**
 * The per-request context an operation sees. A class, not an object literal: a literal with a
 * getter is built through a slow path on every request.
 */
import type { DeferredCheck } from '../billing/meter.js';
import { readBody } from '../http/body.js';
import type { Tracked } from '../observability/record.js';
import type { ApiKeyRecord } from '../stores/types.js';
import type { Exchange, RequestContext } from './types.js';

export class Context implements RequestContext {
  readonly request: Request;
  readonly requestId: string;
  readonly clientIp: string;
  readonly params: Record<string, string>;
  readonly key: ApiKeyRecord;
  readonly observed: Tracked;
  readonly headers: Record<string, string>;
  private readonly rawQuery: string;
  private bodyBytes: Promise<Uint8Array> | undefined;
  private bodyReleased = false;

  constructor(
    private readonly x: Exchange,
    private readonly maxBodyBytes: number,
    private readonly bodyTimeoutMs: number,
  ) {
    this.request = x.request;
    this.requestId = x.requestId;
    this.clientIp = x.clientIp;
    this.params = x.route!.params;
    this.key = x.key!;
    this.observed = x.observed;
    this.headers = x.headers;
    this.rawQuery = x.query;
  }

  get query(): URLSearchParams {
    return new URLSearchParams(this.rawQuery);
  }

  body(): Promise<Uint8Array> {
    // A program error, not the client's: reading the body again would find it consumed.
    if (this.bodyReleased) return Promise.reject(new Error('the request body was released: read it before the upstream call'));
    return (this.bodyBytes ??= readBody(this.request, this.maxBodyBytes, this.bodyTimeoutMs));
  }

  releaseBody(): void {
    this.bodyReleased = true;
    this.bodyBytes = undefined;
  }

  takeKeyCheck(): DeferredCheck | null {
    // Taken once: a store step that failed half-way is never counted a second time.
    const check = this.x.keyCheck;
    this.x.keyCheck = null;
    return check;
  }

  async runKeyCheck(): Promise<void> {
    await this.takeKeyCheck()?.run();
  }
}

/** The context of `x`, built once. */
export function contextOf(x: Exchange, maxBodyBytes: number, bodyTimeoutMs: number): RequestContext {
  return (x.ctx ??= new Context(x, maxBodyBytes, bodyTimeoutMs));
}
