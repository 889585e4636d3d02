/**
 * A stream whose upstream sends its 200 before its first event (a model slow to start): the
 * client gets the 200 then, with a comment every SSE client skips, and the answer still goes
 * straight into node:http's response (the direct lane), not through a piped stream.
 */
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let firstEventAt = 0;

beforeEach(async () => {
  up = await startTestUpstream();
  up.setBehavior({
    kind: 'custom',
    handle(_req, res) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      const chunk = (delta: Record<string, unknown>, finish: string | null) =>
        `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      setTimeout(() => {
        firstEventAt = performance.now();
        res.write(chunk({ role: 'assistant', content: 'Hi' }, null));
        setTimeout(() => {
          res.write(chunk({}, 'stop'));
          res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 3, completion_tokens: 1 } })}\n\n`);
          res.end('data: [DONE]\n\n');
        }, 30);
      }, 300);
    },
  });
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 10 });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterEach(async () => {
  vi.restoreAllMocks();
  await gw.close();
  await up.close();
});

it('the 200 comes before the first event, and the answer is written directly, not piped', async () => {
  const pipe = vi.spyOn(Readable.prototype, 'pipe');
  const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true });
  const headersAt = performance.now();
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(headersAt).toBeLessThan(firstEventAt);
  expect(text.startsWith(': keep-alive\n\ndata: {')).toBe(true);
  expect(text).toContain('data: [DONE]');
  expect(pipe).not.toHaveBeenCalled();
});
