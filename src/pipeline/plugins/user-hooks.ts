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
    const setResponse = (r: Response) => {
      if (res && res !== r) replaced.push(res);
      res = r;
    };
    if (hooks.has('onRequest')) {
      await hooks.run('onRequest', { request: x.request, requestId: x.requestId, setResponse });
    }
    res ??= await next();
    if (hooks.has('onResponse')) {
      await hooks.run('onResponse', { request: x.request, requestId: x.requestId, response: res, setResponse });
    }
    return replaced.length === 0 ? res : whenDone(res, () => dropUnread(replaced));
  };
}
