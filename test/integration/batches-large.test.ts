/**
 * A large batch is read and planned in slices: every other call goes on meanwhile. Before, a
 * 50,000-line file was read and planned in one go, seconds in which nothing else ran (streams
 * stalled), and a refused create (a bad last line) cost its client nothing to repeat.
 */
import OpenAI, { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { closedAfterAll } from '../helpers/batches.js';
import { MODEL, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const keep = closedAfterAll();
const LINES = 20_000;

/** Counts the turns of the event loop until `stop` is called. */
function turns(): { stop(): number } {
  let n = 0;
  let on = true;
  const tick = () => {
    n++;
    if (on) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    stop() {
      on = false;
      return n;
    },
  };
}

describe('a batch of many lines', () => {
  it('is created while the event loop keeps turning, and a bad last line refuses it naming the line', async () => {
    const up = keep(await startTestUpstream());
    const setup = testConfig({ upstreamUrl: up.url, walletUsd: 1_000 });
    const gw = keep(await startGateway(setup.options));
    const openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const lines = Array.from({ length: LINES }, (_, i) =>
      JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: `line ${i}` }] } }),
    );
    const bad = [...lines.slice(0, -1), JSON.stringify({ custom_id: 'last', method: 'POST', url: '/v1/chat/completions', body: { model: 'no/such-model', messages: [] } })];
    const badFile = await openai.files.create({ file: await toFile(Buffer.from(bad.join('\n')), 'bad.jsonl'), purpose: 'batch' });
    const counter = turns();
    const refused = await openai.batches.create({ input_file_id: badFile.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).catch((e: unknown) => e);
    const during = counter.stop();
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(new RegExp(`Line ${LINES}:`));
    // Reading and planning 20,000 lines takes far more than one slice: the loop turned between
    // them (in one go, only the request's own few round trips would let it turn).
    expect(during).toBeGreaterThan(10);
    const file = await openai.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
    const created = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    expect(created.request_counts?.total).toBe(LINES);
    await openai.batches.cancel(created.id);
  }, 60_000);
});
