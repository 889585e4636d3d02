/**
 * The quick start's config (examples/gateway.config.json, the built-in simulator) runs a
 * batch end to end through the official SDK, exactly as docs/api.md shows it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { silentLogger } from '../../src/observability/log.js';
import { startGateway, type RunningGateway } from '../helpers/gateway.js';

const config = JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'examples', 'gateway.config.json'), 'utf8')) as Record<string, unknown> & { keys: { key: string }[] };
let gw: RunningGateway;

beforeAll(async () => {
  // Its books in memory rather than in ./data: the rest is the quick start's.
  const { storage: _storage, settleJournalDir: _journal, ...rest } = config;
  gw = await startGateway({ ...rest, logger: silentLogger } as Parameters<typeof startGateway>[0]);
});
afterAll(() => gw.close());

it('the SDK creates a file and a batch, polls it to completed and reads its output', async () => {
  const client = new OpenAI({ apiKey: config.keys[0]!.key, baseURL: gw.baseURL, maxRetries: 0 });
  const lines = ['Hello', 'Tell me a story'].map((content, i) =>
    JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'sim/fast-chat', max_tokens: 100, messages: [{ role: 'user', content }] } }),
  );
  const file = await client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
  let batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const until = Date.now() + 20_000;
  while (!['completed', 'failed', 'cancelled', 'expired'].includes(batch.status) && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 100));
    batch = await client.batches.retrieve(batch.id);
  }
  expect(batch.status).toBe('completed');
  const output = (await (await client.files.content(batch.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  expect(output.map((l) => l.custom_id)).toEqual(['req-0', 'req-1']);
  for (const l of output) expect(typeof l.response.body.choices[0].message.content).toBe('string');
  expect((await auditBooks(gw.stores)).differences).toEqual([]);
}, 30_000);
