/**
 * model-gateway on Bun.serve, at http://127.0.0.1:3000/v1. From the repository root:
 *
 *   node_modules/.bin/bun examples/bun/server.ts
 *
 * PORT, HOST and MODEL_GATEWAY_CONFIG (a config file; default: examples/gateway.config.json)
 * change the defaults.
 */
// In your app: import { createGateway, loadConfigFile } from 'model-gateway';
import { createGateway, loadConfigFile, type GatewayOptions } from '../../src/index.js';
// In your app: import { toBun } from 'model-gateway/bun';
import { toBun } from '../../adapters/bun.js';

declare const Bun: {
  serve(options: { port: number; hostname: string; fetch: ReturnType<typeof toBun> }): { url: URL; stop(force?: boolean): Promise<void> };
};

const configFile = process.env.MODEL_GATEWAY_CONFIG ?? new URL('../gateway.config.json', import.meta.url).pathname;
const config = (await loadConfigFile(configFile)) as GatewayOptions;
// better-sqlite3 (a Node native module) does not load in Bun: the demo's SQLite books become
// memory here. In your app on Bun, use PostgreSQL or Redis storage for durable books.
if (config.storage?.driver === 'sqlite') {
  console.log('note: SQLite storage needs Node.js; on Bun this example keeps its books in memory');
  config.storage = { driver: 'memory' };
}
const gateway = createGateway(config);
await gateway.ready;

const server = Bun.serve({
  port: Number(process.env.PORT ?? 3000),
  hostname: process.env.HOST ?? '127.0.0.1',
  fetch: toBun(gateway),
});
console.log(`model-gateway on Bun: ${new URL('v1', server.url).href}`);

// Shutdown: the calls and streams in flight finish within the gateway's grace period (new
// ones get 503 meanwhile), then the server stops once their answers are written.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void Promise.resolve(gateway.dispose())
      .then(() => server.stop())
      .finally(() => process.exit(0));
  });
}
