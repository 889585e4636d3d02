/**
 * Output counted when the upstream reports no usage, through the gateway: with `n` choices a
 * stream interleaves their deltas, and each choice's text is counted on its own, so the stream
 * bills what the plain answer with the same choices bills (run together, " the" of one choice
 * and "ory" of the other would read " theory"); and what describes a choice beside its delta
 * (Azure's content_filter_results) is not output.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Tokenizer } from '../../src/billing/tokens.js';
import { loadTokenizer } from '../helpers/billing.js';
import { chargedCall, MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const cfr = { hate: { filtered: false, severity: 'safe' }, self_harm: { filtered: false, severity: 'safe' }, violence: { filtered: false, severity: 'safe' } };
const chunk = (choices: unknown[]) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: MODEL, choices })}\n\n`;

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let tokenizer: Tokenizer;

beforeAll(async () => {
  up = await startTestUpstream();
  tokenizer = await loadTokenizer();
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 100 });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const completionOf = (charge: { units: unknown } | null) => (charge?.units as { completion?: number } | undefined)?.completion;

describe('output counted without usage', () => {
  it('n = 2: the interleaved stream bills each choice counted on its own, as the plain answer does', async () => {
    const expected = tokenizer.count(' the'.repeat(200)) + tokenizer.count('ory'.repeat(200));
    up.setBehavior({
      kind: 'custom',
      handle(_req, res, rec) {
        if (rec.body?.stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          let out = '';
          for (let i = 0; i < 200; i++) out += chunk([{ index: 0, delta: { content: ' the' }, finish_reason: null }]) + chunk([{ index: 1, delta: { content: 'ory' }, finish_reason: null }]);
          out += chunk([{ index: 0, delta: {}, finish_reason: 'stop' }, { index: 1, delta: {}, finish_reason: 'stop' }]);
          res.end(`${out}data: [DONE]\n\n`);
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'c',
            object: 'chat.completion',
            created: 1,
            model: MODEL,
            choices: [
              { index: 0, message: { role: 'assistant', content: ' the'.repeat(200) }, finish_reason: 'stop' },
              { index: 1, message: { role: 'assistant', content: 'ory'.repeat(200) }, finish_reason: 'stop' },
            ],
          }),
        );
      },
    });
    const ask = { model: MODEL, messages: [{ role: 'user', content: 'Two ways' }], n: 2, max_tokens: 500 };
    const streamed = await chargedCall(gw, devKey, '/chat/completions', { ...ask, stream: true });
    const plain = await chargedCall(gw, devKey, '/chat/completions', ask);
    expect([streamed.status, plain.status]).toEqual([200, 200]);
    expect(completionOf(plain.charge)).toBe(expected);
    expect(completionOf(streamed.charge)).toBe(expected);
  });

  it("what describes a choice beside its delta (Azure's content_filter_results) is not output", async () => {
    const words = ['The', ' quick', ' brown', ' fox', ' jumps', ' over', ' the', ' lazy', ' dog.'];
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        let out = '';
        for (const w of words) out += chunk([{ index: 0, delta: { content: w }, content_filter_results: cfr, finish_reason: null }]);
        out += chunk([{ index: 0, delta: {}, content_filter_results: cfr, finish_reason: 'stop' }]);
        res.end(`${out}data: [DONE]\n\n`);
      },
    });
    const streamed = await chargedCall(gw, devKey, '/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Say it' }], stream: true, max_tokens: 100 });
    expect(streamed.status).toBe(200);
    expect(completionOf(streamed.charge)).toBe(tokenizer.count(words.join('')));
  });
});
