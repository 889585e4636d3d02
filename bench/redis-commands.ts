/**
 * Redis commands per billed chat call: a gateway on Redis storage (a real Redis, REDIS_URL or
 * 127.0.0.1:6379) makes warmed-up chat calls against the built-in simulator, and every command
 * its ioredis client sends is counted (the commands run for real; only the count is observed).
 *
 *   node --import tsx bench/redis-commands.ts
 *
 * `npm run bench` runs the same count (bench/run.ts) when Redis answers; this file also runs alone.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createGateway } from '../src/gateway.js';
import { silentLogger } from '../src/observability/log.js';
import { createRedisStores } from '../src/stores/redis/entry.js';
import { deleteKeysWithPrefix } from './redis-util.js';
import { MAX_REDIS_COMMANDS_PER_CALL } from './targets.js';

const KEY = `sk-mg-${'R'.repeat(20)}${randomBytes(12).toString('hex')}`;

export interface CommandCount {
  calls: number;
  commands: number;
  perCall: number;
  byCommand: Record<string, number>;
}

export async function countRedisCommands(url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', calls = 50): Promise<CommandCount> {
  const client = new Redis(url, { commandTimeout: 2000, enableOfflineQueue: true, maxRetriesPerRequest: 1 });
  const prefix = `mgcount:${randomBytes(4).toString('hex')}:`;
  const byCommand: Record<string, number> = {};
  let counting = false;
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((command: { name: string }, stream?: unknown) => {
    if (counting) byCommand[command.name] = (byCommand[command.name] ?? 0) + 1;
    return send(command as never, stream as never);
  }) as typeof client.sendCommand;

  const gateway = createGateway({
    upstreams: { sim: { simulate: true, chunkDelayMs: 0, imageDelayMs: 0, videoDurationMs: 0 } },
    models: [{ id: 'sim/chat', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    accounts: [{ id: 'acct', walletUsd: 100 }],
    keys: [{ key: KEY, account: 'acct' }],
    limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000 },
    stores: createRedisStores({ client, keyPrefix: prefix }),
    logger: silentLogger,
  });
  await gateway.ready;
  const chat = () =>
    gateway.fetch(
      new Request('http://gateway/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim/chat', messages: [{ role: 'user', content: 'count my commands' }] }),
      }),
      { clientAddress: '127.0.0.1' },
    );
  try {
    // Warm-up: scripts loaded (EVALSHA from then on) and the key lookup cached.
    for (let i = 0; i < 3; i++) await (await chat()).text();
    // The last warm-up call's settle goes out after its answer: let it land before counting.
    await new Promise((r) => setTimeout(r, 200));
    counting = true;
    for (let i = 0; i < calls; i++) {
      const res = await chat();
      if (res.status !== 200) throw new Error(`chat call answered ${res.status}: ${await res.text()}`);
      await res.text();
    }
    // Settling finishes in the background of the answer; let it land before counting stops.
    await new Promise((r) => setTimeout(r, 200));
    counting = false;
  } finally {
    await gateway.dispose();
    await deleteKeysWithPrefix(client, prefix);
    client.disconnect();
  }
  const commands = Object.values(byCommand).reduce((a, b) => a + b, 0);
  return { calls, commands, perCall: commands / calls, byCommand };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const r = await countRedisCommands();
  console.log(`Redis commands per billed chat call: ${r.perCall.toFixed(2)} (${r.commands} over ${r.calls} calls: ${JSON.stringify(r.byCommand)})`);
  const goal = `at most ${MAX_REDIS_COMMANDS_PER_CALL} Redis commands per billed chat call`;
  console.log(r.perCall <= MAX_REDIS_COMMANDS_PER_CALL ? `MET      ${goal}` : `NOT MET  ${goal}`);
}
