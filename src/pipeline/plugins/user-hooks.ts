/** The user plugins' onRequest (which may answer first) and onResponse (which sees every answer, refusals included). */
import type { Hooks } from '../hooks.js';
import type { Stage } from '../types.js';

export function userHooks(hooks: Hooks): Stage | null {
  if (!hooks.has('onRequest') && !hooks.has('onResponse')) return null;
  return async (x, next) => {
    let res: Response | undefined;
    if (hooks.has('onRequest')) {
      await hooks.run('onRequest', { request: x.request, requestId: x.requestId, setResponse: (r) => void (res = r) });
    }
    res ??= await next();
    if (hooks.has('onResponse')) {
      await hooks.run('onResponse', { request: x.request, requestId: x.requestId, response: res, setResponse: (r) => void (res = r) });
    }
    return res;
  };
}
