/**
 * Rewrites what goes upstream: tags every call with the caller's key id as OpenAI's `user`
 * field (for the provider's abuse monitoring), and caps `temperature` at `maxTemperature`.
 */
import type { GatewayPlugin } from '../../src/index.js'; // your app: 'model-gateway'

export function rewriteRequest(options: { maxTemperature: number }): GatewayPlugin {
  return {
    name: 'rewrite-request',
    onUpstreamRequest({ body, key, path, setBody }) {
      if (path !== '/chat/completions') return;
      const temperature = typeof body.temperature === 'number' ? Math.min(body.temperature, options.maxTemperature) : undefined;
      setBody({ ...body, user: key.id, ...(temperature === undefined ? {} : { temperature }) });
    },
  };
}
