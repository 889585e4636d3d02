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
}

export interface Upstream {
  name: string;
  simulated: boolean;
  call(call: UpstreamCall): Promise<UpstreamResponse>;
  close(): Promise<void>;
}

export interface HttpUpstreamOptions {
  baseUrl: string;
  apiKey: string;
  timeoutMs: number;
  connections: number;
}
