/**
 * Only a stream's final events wait for its charge: the usage chunk and [DONE]. The chunk that
 * ends the content (its last words and finish_reason) goes out as it arrives, also when the
 * upstream sends the usage much later, and whether it came in the stream's first read or a
 * later one, with the usage asked for or not. The upstream here waits for the test to see the
 * last words before it sends the usage: a relay that held them would never finish.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
/** Opens the upstream's wait before its usage chunk. */
let release: () => void = () => {};

const chunk = (delta: Record<string, unknown>, finish: string | null, model: string) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-end', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

beforeAll(async () => {
  up = await startTestUpstream();
  up.setBehavior((rec) => ({
    kind: 'custom',
    async handle(_req, res) {
      const model = String(rec.body?.model);
      const messages = (rec.body?.messages ?? []) as { content: string }[];
      const opening = messages[0]?.content === 'opening';
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      // The last words come with the finish: in the stream's first read, or after a first chunk.
      if (!opening) {
        res.write(chunk({ role: 'assistant', content: 'The ' }, null, model));
        await new Promise((r) => setTimeout(r, 30));
      }
      res.write(chunk({ content: 'final words of the answer' }, 'stop', model));
      await new Promise<void>((r) => (release = r));
      res.write(`data: ${JSON.stringify({ id: 'chatcmpl-end', object: 'chat.completion.chunk', created: 1, model, choices: [], usage: { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 } })}\n\n`);
      res.end('data: [DONE]\n\n');
    },
  }));
  const setup = testConfig({ upstreamUrl: up.url });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
});

describe('the chunk that ends the content', () => {
  it.each([
    ['in the stream’s first read', 'opening', false],
    ['in a later read', 'later', false],
    ['in a later read, the usage asked for', 'later', true],
  ])('goes out before the usage arrives (%s)', async (_what, content, usage) => {
    const before = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content }], ...(usage ? { stream_options: { include_usage: true } } : {}) }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    // Read until the last words have arrived: the upstream has not sent its usage yet.
    while (!text.includes('final words of the answer')) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the stream ended before its last words: ${text}`);
      text += decoder.decode(value, { stream: true });
    }
    expect(text).not.toContain('[DONE]');
    expect(text).toContain('"finish_reason":"stop"');
    release();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(text.includes('"usage":{"prompt_tokens":9')).toBe(usage);
    const charges = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    expect(charges).toHaveLength(before + 1);
    expect(charges.at(-1)).toMatchObject({ measured: 'usage', units: { kind: 'tokens', prompt: 9, completion: 6 } });
  });
});

describe('a read that holds good events and then a bad one', () => {
  it.each([
    ['an error event', 'data: {"error":{"message":"the model broke","type":"server_error"}}\n\n'],
    ['a malformed event', 'data: {not json\n\n'],
  ])('chat: the events before %s reach the client before the error, and what they carried is what is billed', async (_what, bad) => {
    const g = await startTestUpstream();
    g.setBehavior((rec) => ({
      kind: 'custom',
      handle(_req, res) {
        const model = String(rec.body?.model);
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        // One write: three deltas, then the bad event.
        res.end(chunk({ role: 'assistant', content: 'alpha ' }, null, model) + chunk({ content: 'beta ' }, null, model) + chunk({ content: 'gamma' }, null, model) + bad);
      },
    }));
    const setup = testConfig({ upstreamUrl: g.url });
    const gw2 = await startGateway(setup.options);
    try {
      const res = await fetch(`${gw2.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      });
      const text = await res.text();
      const alpha = text.indexOf('alpha ');
      const gamma = text.indexOf('gamma');
      const error = text.indexOf('"error"');
      expect(alpha).toBeGreaterThan(-1);
      expect(gamma).toBeGreaterThan(alpha);
      expect(error).toBeGreaterThan(gamma);
      expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
      const [charge] = await chargesOf(gw2.gateway.admin.ledger(ACCOUNT));
      expect(charge).toMatchObject({ measured: 'tokenizer', units: { kind: 'tokens', completion: 3 } });
    } finally {
      await gw2.close();
      await g.close();
    }
  });
});

it('Responses: the deltas before an error event in the same read reach the client before it', async () => {
  const g = await startTestUpstream();
  // Written back to back in one turn: the gateway reads them together.
  g.setBehavior({ kind: 'response', chunks: ['alpha ', 'beta ', 'gamma'], errorAfter: 2 });
  const setup = testConfig({ upstreamUrl: g.url });
  const gw2 = await startGateway(setup.options);
  try {
    const res = await fetch(`${gw2.baseURL}/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream: true, input: 'hi' }),
    });
    const text = await res.text();
    const beta = text.indexOf('"delta":"beta "');
    expect(text.indexOf('"delta":"alpha "')).toBeGreaterThan(-1);
    expect(beta).toBeGreaterThan(text.indexOf('"delta":"alpha "'));
    expect(text.indexOf('event: error')).toBeGreaterThan(beta);
  } finally {
    await gw2.close();
    await g.close();
  }
});
