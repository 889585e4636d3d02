/** The request's key (401 otherwise), recorded, then the plugins' onAuthenticated. */
import type { Authenticator } from '../../auth/keys.js';
import type { ApiKeyRecord } from '../../stores/types.js';
import { type Hooks, pluginKey } from '../hooks.js';
import type { Exchange, Stage } from '../types.js';

export function auth(authenticator: Authenticator, hooks: Hooks): Stage {
  const authenticated = (x: Exchange, key: ApiKeyRecord, next: () => Promise<Response>): Promise<Response> => {
    x.key = key;
    x.observed.record.keyId = key.id;
    x.observed.record.account = key.accountId;
    if (!hooks.has('onAuthenticated')) return next();
    return hooks
      .run('onAuthenticated', { request: x.request, requestId: x.requestId, key: pluginKey(key), account: key.accountId })
      .then(next);
  };
  return (x, next) => {
    // Anthropic's clients send the key as `x-api-key`; either header names one of the gateway's keys.
    const headers = x.request.headers;
    const apiKey = headers.get('authorization') ? null : headers.get('x-api-key');
    const key = authenticator.authenticate(apiKey ? `Bearer ${apiKey}` : headers.get('authorization'));
    // A cached key is answered synchronously: no await, no microtask turn.
    return typeof (key as Partial<Promise<ApiKeyRecord>>).then === 'function'
      ? (key as Promise<ApiKeyRecord>).then((k) => authenticated(x, k, next))
      : authenticated(x, key as ApiKeyRecord, next);
  };
}
