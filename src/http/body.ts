/** Reading a request body within the gateway's size and time limits. */
import { GatewayError } from '../errors.js';

const tooLarge = (max: number) =>
  new GatewayError('request_too_large', `The request body is larger than the limit of ${max} bytes.`);

/**
 * Reads the body as bytes, refusing more than `maxBytes` (before any parsing: a declared
 * Content-Length over the limit is refused without reading) and a body slower than `timeoutMs`.
 */
export async function readBody(request: Request, maxBytes: number, timeoutMs: number): Promise<Uint8Array> {
  const declared = request.headers.get('content-length');
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge(maxBytes);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new GatewayError('request_timeout', `The request body was not received within ${timeoutMs} ms.`)),
      timeoutMs,
    );
  });
  if (declared !== null && /^\d+$/.test(declared)) {
    // A declared length within the limit: the HTTP parser stops the body at that length, so
    // it can be read in one go (no web-stream reader per chunk).
    try {
      const buf: ArrayBuffer | Uint8Array = await Promise.race([request.arrayBuffer(), timeout]);
      if (buf.byteLength > maxBytes) throw tooLarge(maxBytes);
      // The server adapter hands back a Buffer (already a Uint8Array): no copy.
      return buf instanceof Uint8Array ? buf : new Uint8Array(buf);
    } finally {
      clearTimeout(timer);
    }
  }
  const body = request.body;
  if (!body) {
    clearTimeout(timer);
    return new Uint8Array(0);
  }
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
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
