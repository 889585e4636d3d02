/**
 * An output guardrail that rewrites a Responses stream takes the log probabilities out of every
 * copy of the text it rewrote: their tokens would spell what was withheld. The part's own copy
 * (`response.content_part.done`) kept them before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  devKey = setup.devKey;
  setup.options.guardrails = [{ id: 'pii-out', kind: 'pii', on: ['output'], action: 'redact', entities: ['email'] }];
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const logprobs = (tokens: string[]) => tokens.map((token) => ({ token, logprob: -0.1, bytes: [...Buffer.from(token)], top_logprobs: [] }));

describe('a redacted Responses stream', () => {
  it('carries no log probabilities that spell the redacted text, in any event', async () => {
    const tokens = ['Mail ', 'alice', '.secret', '@example', '.com', ' now'];
    const text = tokens.join('');
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        let seq = 0;
        const ev = (type: string, d: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...d })}\n\n`);
        const response = (status: string, output: unknown[], usage: unknown) => ({ id: 'resp_1', object: 'response', created_at: 1, model: 'provider-chat-1', status, output, usage });
        const at = { item_id: 'msg_1', output_index: 0, content_index: 0 };
        ev('response.created', { response: response('in_progress', [], null) });
        ev('response.output_item.added', { output_index: 0, item: { id: 'msg_1', type: 'message', role: 'assistant', status: 'in_progress', content: [] } });
        ev('response.content_part.added', { ...at, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } });
        for (const t of tokens) ev('response.output_text.delta', { ...at, delta: t, logprobs: logprobs([t]) });
        ev('response.output_text.done', { ...at, text, logprobs: logprobs(tokens) });
        const part = { type: 'output_text', text, annotations: [], logprobs: logprobs(tokens) };
        ev('response.content_part.done', { ...at, part });
        const item = { id: 'msg_1', type: 'message', role: 'assistant', status: 'completed', content: [part] };
        ev('response.output_item.done', { output_index: 0, item });
        ev('response.completed', { response: response('completed', [item], { input_tokens: 5, output_tokens: 6, total_tokens: 11 }) });
        res.end();
      },
    });
    const res = await fetch(`${gw.baseURL}/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'hi', stream: true, include: ['message.output_text.logprobs'] }),
    });
    expect(res.status).toBe(200);
    const raw = await res.text();
    expect(raw).toContain('[REDACTED:EMAIL]');
    const partDone = raw.split('\n\n').find((block) => block.startsWith('event: response.content_part.done'));
    expect(partDone).toBeDefined();
    for (const secret of ['alice', '.secret', '@example']) expect(raw).not.toContain(secret);
  });
});
