/**
 * One gateway per server process, created on the first request (not while `next build`
 * evaluates the route). MODEL_GATEWAY_CONFIG names a config file read at start; without it
 * the example config is used.
 */
import { createGateway, loadConfigFile, type Gateway, type GatewayOptions } from 'model-gateway';
import exampleConfig from '../../gateway.config.json';

const slot = Symbol.for('model-gateway.next-example');

export function getGateway(): Promise<Gateway> {
  const holder = globalThis as { [slot]?: Promise<Gateway> };
  holder[slot] ??= create();
  return holder[slot];
}

async function create(): Promise<Gateway> {
  const file = process.env.MODEL_GATEWAY_CONFIG;
  const config = file ? await loadConfigFile(file) : exampleConfig;
  const gateway = createGateway(config as GatewayOptions);
  await gateway.ready;
  return gateway;
}
