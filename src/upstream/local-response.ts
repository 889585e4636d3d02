/** Upstream responses made in process (the simulator), with the same shape as HTTP ones. */
import type { UpstreamResponse } from './client.js';

const encoder = new TextEncoder();

export function jsonResponse(status: number, value: unknown, headers: Record<string, string> = {}): UpstreamResponse {
  return bytesResponse(status, encoder.encode(JSON.stringify(value)), { 'content-type': 'application/json', ...headers });
}

export function bytesResponse(status: number, bytes: Uint8Array, headers: Record<string, string>): UpstreamResponse {
  return streamResponse(
    status,
    (async function* () {
      yield bytes;
    })(),
    headers,
  );
}

export function streamResponse(
  status: number,
  body: AsyncIterable<Uint8Array>,
  headers: Record<string, string>,
): UpstreamResponse {
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  return {
    status,
    header: (name) => lower[name.toLowerCase()],
    body,
    async text() {
      const parts: Uint8Array[] = [];
      for await (const p of body) parts.push(p);
      return Buffer.concat(parts).toString('utf8');
    },
    discard() {
      void (body as AsyncGenerator<Uint8Array>).return?.(undefined);
    },
  };
}
