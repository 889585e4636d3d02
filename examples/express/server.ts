/**
 * model-gateway inside an Express 5 app, at http://127.0.0.1:3000/api/v1. From the
 * repository root:
 *
 *   node --import tsx examples/express/server.ts
 *
 * PORT, HOST and MODEL_GATEWAY_CONFIG (a config file; default: examples/gateway.config.json)
 * change the defaults.
 */
import express from 'express';
// In your app: import { createGateway, loadConfigFile } from 'model-gateway';
import { createGateway, loadConfigFile, type GatewayOptions } from '../../src/index.js';
// In your app: import { toExpress } from 'model-gateway/express';
import { toExpress } from '../../adapters/express.js';

const configFile = process.env.MODEL_GATEWAY_CONFIG ?? new URL('../gateway.config.json', import.meta.url).pathname;
const gateway = createGateway((await loadConfigFile(configFile)) as GatewayOptions);
await gateway.ready;

const app = express();
// The gateway first: it reads the request body itself (with its own size limit).
app.use('/api', toExpress(gateway));
// The rest of the app, with its own body parser.
app.use(express.json());
app.get('/', (_req, res) => {
  res.type('text').send('model-gateway example: the API is at /api/v1\n');
});

const server = app.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? '127.0.0.1', () => {
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : process.env.PORT;
  console.log(`model-gateway on Express: http://${process.env.HOST ?? '127.0.0.1'}:${port}/api/v1`);
});

// Shutdown: no new connections; the calls and streams in flight finish within the gateway's
// grace period (dispose() resolves once their answers are written); then the rest goes.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    server.close();
    void Promise.resolve(gateway.dispose()).finally(() => {
      server.closeAllConnections();
      process.exit(0);
    });
  });
}
