/** The user plugins' onRequest (which may answer first) and onResponse (which sees every answer, refusals included). */
import type { Hooks } from '../hooks.js';
import type { Stage } from '../types.js';

/**
 * A response a plugin replaced, that nothing has read by the time the answer kept is sent, is
 * cancelled: an upstream stream nobody reads would keep its billed call open, holding the
 * client's money and an upstream connection until the process stops. Cancelled, it ends as a
 * stream the client left, and the call settles what the upstream produced. It is looked at only
 * once the kept answer is done, since a plugin may have wrapped the replaced body in the kept
 * one (then reading the kept answer reads it, and it is left alone).
 */
function dropUnread(replaced: readonly Response[]): void {
  for (const r of replaced) {
    if (!r.body || r.bodyUsed || r.body.locked) continue;
    r.body.cancel().catch(() => {});
  }
}

/** `kept`, calling `done` once its body has been read to the end, failed or been cancelled. */
function whenDone(kept: Response, done: () => void): Response {
  if (!kept.body) {
    done();
    return kept;
  }
  const reader = kept.body.getReader();
  let called = false;
  const once = () => {
    if (called) return;
    called = true;
    done();
  };
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done: end } = await reader.read();
        if (end) {
          controller.close();
          once();
        } else controller.enqueue(value);
      } catch (err) {
        controller.error(err);
        once();
      }
    },
    async cancel(reason) {
      once();
      await reader.cancel(reason);
    },
  });
  return new Response(body, { status: kept.status, statusText: kept.statusText, headers: kept.headers });
}

export function userHooks(hooks: Hooks): Stage | null {
  if (!hooks.has('onRequest') && !hooks.has('onResponse')) return null;
  return async (x, next) => {
    let res: Response | undefined;
    const replaced: Response[] = [];
    let own: Response | undefined;
    const setResponse = (r: Response) => {
      // Anything else is the plugin's bug: thrown in its hook, which is logged and skipped. Told
      // by its shape, not its class: the server adapter's, undici's and the runtime's Response
      // classes are all Responses here.
      if (!isResponse(r)) throw new TypeError(`setResponse takes a Response, not ${r === null ? 'null' : typeof r}`);
      if (r === res) return;
      if (res) replaced.push(res);
      res = mutable(r);
    };
    if (hooks.has('onRequest')) {
      await hooks.run('onRequest', { request: x.request, requestId: x.requestId, setResponse });
    }
    res ??= own = await next();
    if (hooks.has('onResponse')) {
      await hooks.run('onResponse', { request: x.request, requestId: x.requestId, response: res, setResponse });
    }
    if (res === own) return res;
    // A plugin's answer is the gateway's answer too: it carries the request id (and the
    // headers the gateway gave the request, rate limits included).
    if (x.late) for (const k in x.headers) x.late[k] = x.headers[k]!;
    else for (const k in x.headers) res.headers.set(k, x.headers[k]!);
    return replaced.length === 0 ? res : whenDone(res, () => dropUnread(replaced));
  };
}

const isResponse = (r: unknown): r is Response =>
  typeof r === 'object' &&
  r !== null &&
  typeof (r as Response).status === 'number' &&
  typeof (r as Response).headers?.get === 'function' &&
  typeof (r as Response).headers.set === 'function';

/** Headers that describe the bytes as they came over a wire, not the body as a Response reads it. */
const WIRE_HEADERS = ['content-encoding', 'content-length', 'transfer-encoding'];

/**
 * `r` with headers the gateway can add to: `Response.redirect()` and a `fetch()` answer have
 * immutable ones, which the request id and Server-Timing could not be set on (a 500 instead).
 * The copy drops the wire headers: a `fetch()` answer's body is already decoded, so its
 * `content-encoding: gzip` and `content-length` would make it unreadable.
 */
function mutable(r: Response): Response {
  try {
    r.headers.set('x-request-id', r.headers.get('x-request-id') ?? '');
    return r;
  } catch {
    const headers = new Headers(r.headers);
    for (const h of WIRE_HEADERS) headers.delete(h);
    return new Response(r.body, { status: r.status, statusText: r.statusText, headers });
  }
}
