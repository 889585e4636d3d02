/** Small HTTP helpers shared by the routes: bounded body reading and JSON answers. */
import { GatewayError } from './errors.js';

const tooLarge = (max: number) =>
  new GatewayError('request_too_large', `The request body is larger than the limit of ${max} bytes.`);

/**
 * Reads the body as bytes, refusing more than `maxBytes` (before any parsing: a declared
 * Content-Length over the limit is refused without reading) and a body slower than `timeoutMs`.
 */
export async function readBody(request: Request, maxBytes: number, timeoutMs: number): Promise<Uint8Array> {
  const declared = request.headers.get('content-length');
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge(maxBytes);
  const body = request.body;
  if (!body) return new Uint8Array(0);
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new GatewayError('request_timeout', `The request body was not received within ${timeoutMs} ms.`)),
      timeoutMs,
    );
  });
  try {
    for (;;) {
      const { done, value } = await Promise.race([reader.read(), timeout]);
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) throw tooLarge(maxBytes);
      parts.push(value);
    }
  } catch (err) {
    reader.cancel().catch(() => undefined);
    throw err;
  } finally {
    clearTimeout(timer);
  }
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Parses a JSON object body; anything else is 400 invalid_json / invalid_request. */
export function parseJsonObject(bytes: Uint8Array): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(utf8.decode(bytes));
  } catch {
    throw new GatewayError('invalid_json', 'The request body is not valid JSON.');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new GatewayError('invalid_request', 'The request body must be a JSON object.');
  }
  return value as Record<string, unknown>;
}

export function json(status: number, value: unknown, headers?: Record<string, string>): Response {
  const h = new Headers(headers);
  h.set('content-type', 'application/json');
  return new Response(JSON.stringify(value), { status, headers: h });
}
