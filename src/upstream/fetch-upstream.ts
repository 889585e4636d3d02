/**
 * An HTTP upstream over the runtime's own `fetch`, for runtimes where undici's Pool is not
 * available (Bun replaces the `undici` package with a partial built-in). Same contract as the
 * undici transport: a header timeout, an idle timeout between body chunks, 504 / 502 errors.
 */
import { GatewayError } from '../errors.js';
import { kindOf } from './kinds/index.js';
import { type HttpUpstreamOptions, outgoingHeaders, type Upstream, type UpstreamResponse, withQuery } from './types.js';

const timeoutError = (name: string) =>
  new GatewayError('upstream_timeout', `The upstream "${name}" did not answer in time.`);

/** At most `limit` holders at once; the others wait in arrival order. */
class Slots {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  async acquire(): Promise<void> {
    while (this.active >= this.limit) await new Promise<void>((r) => this.waiting.push(r));
    this.active++;
  }

  release(): void {
    this.active--;
    this.waiting.shift()?.();
  }
}

export function createFetchUpstream(
  name: string,
  opts: HttpUpstreamOptions,
  redact: (text: string) => string,
): Upstream {
  const base = opts.baseUrl.replace(/\/+$/, '');
  const auth = opts.apiKey ? kindOf(opts.kind).auth(opts.apiKey) : null;
  // The kind's own headers first: an upstream's configured ones replace them.
  const extra = { ...kindOf(opts.kind).headers, ...opts.headers };
  // fetch has no pool of its own to size: calls beyond maxConnections wait for a free slot.
  const slots = new Slots(opts.maxConnections ?? Number.POSITIVE_INFINITY);
  return {
    name,
    simulated: false,
    async call(c) {
      await slots.acquire();
      let held = true;
      const free = () => {
        if (!held) return;
        held = false;
        slots.release();
      };
      const ac = new AbortController();
      const onAbort = () => ac.abort(c.signal?.reason);
      if (c.signal?.aborted) onAbort();
      c.signal?.addEventListener('abort', onAbort, { once: true });
      let timedOut = false;
      let timer = setTimeout(() => {
        timedOut = true;
        ac.abort();
      }, opts.timeoutMs);
      let res: Response;
      try {
        res = await fetch(base + withQuery(c.path, opts.query), {
          method: c.method,
          headers: outgoingHeaders(c.headers, extra, auth),
          body: (c.body ?? undefined) as BodyInit | undefined,
          signal: ac.signal,
          // A redirect is not followed (as undici's pool on Node does not): fetch would send the
          // prompt and a credential header it does not know (x-api-key, x-goog-api-key, a
          // configured one) to wherever the Location points. The 3xx is the upstream's answer.
          redirect: 'manual',
        });
      } catch (err) {
        clearTimeout(timer);
        free();
        if (c.signal?.aborted) throw err;
        if (timedOut) throw timeoutError(name);
        throw new GatewayError('upstream_error', `The upstream "${name}" could not be reached or failed.`, { cause: err });
      }
      clearTimeout(timer);
      const reader = res.body?.getReader();
      if (!reader) free();
      async function* chunks(): AsyncGenerator<Uint8Array> {
        if (!reader) return;
        try {
          for (;;) {
            const read = reader.read();
            const next = await new Promise<ReadableStreamReadResult<Uint8Array>>((resolve, reject) => {
              timer = setTimeout(() => {
                ac.abort();
                reject(timeoutError(name));
              }, opts.timeoutMs);
              read.then(resolve, reject);
            }).finally(() => clearTimeout(timer));
            if (next.done) return;
            yield next.value;
          }
        } catch (err) {
          if (err instanceof GatewayError || c.signal?.aborted) throw err;
          throw new GatewayError('upstream_error', `The upstream "${name}" failed mid-answer.`, { cause: err });
        } finally {
          free();
          c.signal?.removeEventListener('abort', onAbort);
        }
      }
      const body = chunks();
      const response: UpstreamResponse = {
        status: res.status,
        header: (h) => res.headers.get(h) ?? undefined,
        body,
        async text() {
          const parts: Uint8Array[] = [];
          for await (const p of body) parts.push(p);
          return redact(Buffer.concat(parts).toString('utf8'));
        },
        discard() {
          free();
          ac.abort();
          void reader?.cancel().catch(() => undefined);
        },
      };
      return response;
    },
    async close() {},
  };
}
