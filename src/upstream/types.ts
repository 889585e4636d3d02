/** The contract every upstream transport implements: the undici client, the fetch client, the simulator. */

export interface UpstreamCall {
  method: 'GET' | 'POST';
  /** Path below the upstream's base URL, e.g. "/chat/completions". */
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array | null;
  signal?: AbortSignal;
}

export interface UpstreamResponse {
  status: number;
  header(name: string): string | undefined;
  body: AsyncIterable<Uint8Array>;
  text(): Promise<string>;
  /** Stops reading and frees the connection. */
  discard(): void;
  /**
   * Optional, for a transport that can tell: the body bytes already received, taken at once
   * (null when none are), so a short answer that came with its headers is read without an
   * async iterator. The rest, if any, is read through `body` as usual, or dropped with
   * `skipRest`.
   */
  received?(): Uint8Array | null;
  /** With `received`: reads and drops what is left of the body, so the connection can be reused. */
  skipRest?(): void;
  /**
   * Optional, for a transport that can: hands each read of the body to `listener` as it
   * arrives (no promise per read, as an async iterator takes), then its end or its failure,
   * exactly one of them. Called at most once, instead of iterating `body`.
   */
  listen?(listener: BodyListener): BodyFlow;
}

/** What receives a body read by read (see `UpstreamResponse.listen`). */
export interface BodyListener {
  data(chunk: Uint8Array): void;
  end(): void;
  error(err: unknown): void;
}

/** Backpressure on a listened body: `pause` holds reads back until `resume`. */
export interface BodyFlow {
  pause(): void;
  resume(): void;
}

export interface Upstream {
  name: string;
  simulated: boolean;
  call(call: UpstreamCall): Promise<UpstreamResponse>;
  close(): Promise<void>;
}

export interface HttpUpstreamOptions {
  /** The wire API the upstream speaks (how its key is sent). @default "openai" */
  kind?: 'openai' | 'anthropic' | 'gemini';
  baseUrl: string;
  apiKey: string;
  timeoutMs: number;
  connections: number;
  /** The most connections open at once; overrides `connections`. */
  maxConnections?: number;
  /** Extra headers on every call (Azure's `api-key`, an `anthropic-version`). */
  headers?: Record<string, string>;
  /** Query parameters added to every call's URL (Azure's `api-version`). */
  query?: Record<string, string>;
}

/** The path and query sent upstream: `path` below the base with the upstream's own query parameters added. */
export function withQuery(path: string, query: Record<string, string> | undefined): string {
  if (!query || Object.keys(query).length === 0) return path;
  const extra = new URLSearchParams(query).toString();
  return path + (path.includes('?') ? '&' : '?') + extra;
}

/** Headers sent upstream: the call's, then the upstream's own extras, then its key's headers. */
export function outgoingHeaders(
  headers: Record<string, string>,
  extra: Record<string, string> | undefined,
  auth: Record<string, string> | null,
): Record<string, string> {
  if (!auth && (!extra || Object.keys(extra).length === 0)) return headers;
  // Copied key by key into a fresh object: a spread's copy makes the writes below slow.
  const out: Record<string, string> = {};
  for (const k in headers) out[k] = headers[k]!;
  if (extra) for (const [k, v] of Object.entries(extra)) out[k.toLowerCase()] = v;
  if (auth) for (const k in auth) out[k] = auth[k]!;
  return out;
}
