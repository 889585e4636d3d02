/**
 * model-gateway as a Fastify 5 plugin, at http://127.0.0.1:3000/api/v1. From the repository
 * root:
 *
 *   node --import tsx examples/fastify/server.ts
 *
 * PORT, HOST and MODEL_GATEWAY_CONFIG (a config file; default: examples/gateway.config.json)
 * change the defaults.
 */
import Fastify from 'fastify';
// In your app: import { createGateway, loadConfigFile } from 'model-gateway';
import { createGateway, loadConfigFile, type GatewayOptions } from '../../src/index.js';
// In your app: import { toFastify } from 'model-gateway/fastify';
import { toFastify } from '../../adapters/fastify.js';

const configFile = process.env.MODEL_GATEWAY_CONFIG ?? new URL('../gateway.config.json', import.meta.url).pathname;
const gateway = createGateway((await loadConfigFile(configFile)) as GatewayOptions);
await gateway.ready;

const app = Fastify();
// The plugin's body handling stays inside it: the rest of the app keeps Fastify's parsers.
await app.register(toFastify(gateway), { prefix: '/api' });
app.get('/', async () => 'model-gateway example: the API is at /api/v1\n');
app.addHook('onClose', async () => {
  await gateway.dispose();
});

const origin = await app.listen({ port: Number(process.env.PORT ?? 3000), host: process.env.HOST ?? '127.0.0.1' });
console.log(`model-gateway on Fastify: ${origin}/api/v1`);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void app.close().finally(() => process.exit(0));
  });
}
