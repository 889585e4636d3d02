/**
 * model-gateway/fastify: the gateway as a Fastify 5 plugin.
 *
 *   await app.register(toFastify(gateway), { prefix: '/api' });   // -> /api/v1/chat/completions
 *
 * The plugin's prefix is removed before the gateway sees the path, so leave the gateway's
 * `basePath` unset. Inside the plugin (and only there: it is not wrapped in fastify-plugin)
 * every content-type parser is replaced by one that leaves the body unread, so the gateway
 * reads it with its own size limit; Fastify's `bodyLimit` does not apply to these routes.
 * A request whose Content-Type header does not parse gets Fastify's own 415.
 *
 * Answers are sent as web streams (`reply.send(response)`): chunks are written as they come
 * and the stream is cancelled when the client goes away. The client address for the per-IP
 * throttle is the socket's peer; the gateway's `trustProxy` decides about X-Forwarded-For.
 */
import type { FastifyPluginCallback } from 'fastify';
import type { Gateway } from '../src/gateway.js';
import { handOver, serverContextOf, toFetchRequest, trackWrite } from './internal/node.js';

export function toFastify(gateway: Gateway): FastifyPluginCallback {
  return (fastify, _options, done) => {
    fastify.removeAllContentTypeParsers();
    fastify.addContentTypeParser('*', (_request, _payload, parsed) => parsed(null));
    const prefix = fastify.prefix;
    fastify.all('/*', (request, reply) => {
      // A hook of the host app answered already: nobody would get this call's answer.
      if (reply.sent || reply.raw.headersSent || reply.raw.writableEnded) return reply;
      const url = request.raw.url ?? '/';
      const path = url.startsWith(prefix) ? url.slice(prefix.length) : url;
      const fetchRequest = toFetchRequest(request.raw, reply.raw, path);
      trackWrite(gateway, reply.raw);
      return Promise.resolve(gateway.fetch(fetchRequest, serverContextOf(request.raw, path))).then((response) => {
        // A hook of the host app answered first (a timeout): this answer goes nowhere.
        if (!handOver(reply.raw, response)) return reply;
        // An answer given before the body was read (401, 413, 429): the rest of the body is
        // never read, so the connection cannot carry another request. Closed after this
        // answer, as Fastify's own 413 does; else the next request on it waits unanswered.
        if (!request.raw.complete) reply.header('connection', 'close');
        return reply.send(response);
      });
    });
    done();
  };
}
