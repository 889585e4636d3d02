/**
 * Output guardrails read a chat answer's reasoning (`reasoning_content`, as DeepSeek-style
 * providers show it) and its refusal as they read its content, plain and streamed: a PII value
 * there is redacted before the client sees it, and a block there ends the choice with
 * `content_filter`, nothing after it shown.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, postChat, type RunningGateway, sseData, startGateway, testConfig } from '../helpers/gateway.js';

const EMAIL = 'john@example.com';
/** What the upstream answers next: a message's fields, plain or as streamed deltas (one per element). */
let next: Record<string, string>[] = [];
let upstream: Server;
let gw: RunningGateway;
let devKey = '';

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const body = JSON.parse(raw) as { stream?: boolean };
      const usage = { prompt_tokens: 5, completion_tokens: 9, total_tokens: 14 };
      const base = { id: 'chatcmpl-1', created: 1, model: 'up' };
      if (!body.stream) {
        // The deltas joined: the whole message.
        const message: Record<string, string | null> = { role: 'assistant', content: null };
        for (const delta of next) for (const [k, v] of Object.entries(delta)) message[k] = (message[k] ?? '') + v;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'stop' }], usage }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (choices: unknown[], extra = {}) => `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices, ...extra })}\n\n`;
      let out = chunk([{ index: 0, delta: { role: 'assistant' }, finish_reason: null }]);
      for (const delta of next) out += chunk([{ index: 0, delta, finish_reason: null }]);
      out += chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]) + chunk([], { usage }) + 'data: [DONE]\n\n';
      res.end(out);
    });
  });
  upstream.listen(0, '127.0.0.1');
  await new Promise((r) => upstream.once('listening', r));
  const setup = testConfig({ upstreamUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` });
  devKey = setup.devKey;
  setup.options.guardrails = [
    { id: 'pii-out', kind: 'pii', on: ['output'], action: 'redact' },
    { id: 'codename', kind: 'regex', on: ['output'], patterns: ['nightfall'], action: 'block' },
  ];
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  upstream?.close();
});

async function ask(stream: boolean): Promise<{ message: Record<string, unknown>; finish: unknown }> {
  const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'go' }], stream });
  expect(res.status).toBe(200);
  if (!stream) {
    const body = (await res.json()) as { choices: Array<{ message: Record<string, unknown>; finish_reason: unknown }> };
    return { message: body.choices[0]!.message, finish: body.choices[0]!.finish_reason };
  }
  const message: Record<string, string> = {};
  let finish: unknown = null;
  for (const data of sseData(await res.text())) {
    if (data === '[DONE]') continue;
    for (const c of (JSON.parse(data) as { choices: Array<{ delta?: Record<string, unknown>; finish_reason?: unknown }> }).choices) {
      for (const [k, v] of Object.entries(c.delta ?? {})) if (typeof v === 'string' && k !== 'role') message[k] = (message[k] ?? '') + v;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { message, finish };
}

describe.each([false, true])('chat, %s streamed', (stream) => {
  it('reasoning and a refusal are redacted as content is', async () => {
    // The email split across deltas, in the reasoning and in the refusal.
    next = [{ reasoning_content: 'The user is john@exa' }, { reasoning_content: 'mple.com, so.' }, { refusal: `I will not write to ${EMAIL}.` }];
    const { message, finish } = await ask(stream);
    expect(JSON.stringify(message)).not.toContain(EMAIL);
    expect(message.reasoning_content).toBe('The user is [REDACTED:EMAIL], so.');
    expect(message.refusal).toBe('I will not write to [REDACTED:EMAIL].');
    expect(finish).toBe('stop');
  });

  it('a match at the very end of the reasoning is decided before the content goes out', async () => {
    // Content long enough that the content's own scanners release most of it at once.
    next = [{ reasoning_content: 'Think of nightfall' }, { content: 'The plan is ready, and this sentence is long enough to pass every hold back of the scanners.' }];
    const { message, finish } = await ask(stream);
    expect(finish).toBe('content_filter');
    expect(message.reasoning_content ?? '').toBe('Think of ');
    expect(message.content ?? '').toBe('');
  });

  it('the whole reasoning goes out before content that is then blocked', async () => {
    // The block comes in the content's first chunk, well before its end.
    next = [{ reasoning_content: 'long reasoning tail words here' }, { content: 'About nightfall, and then a long tail of words that passes every hold back of them.' }];
    const { message, finish } = await ask(stream);
    expect(finish).toBe('content_filter');
    expect(message.reasoning_content).toBe('long reasoning tail words here');
    expect(message.content ?? '').toBe('About ');
  });

  it('a block in the reasoning ends the choice there: its content is not shown', async () => {
    next = [{ reasoning_content: 'Think of night' }, { reasoning_content: 'fall, then answer.' }, { content: 'The plan is ready.' }];
    const { message, finish } = await ask(stream);
    expect(finish).toBe('content_filter');
    expect(JSON.stringify(message)).not.toContain('nightfall');
    expect(String(message.reasoning_content ?? '')).toBe('Think of ');
    expect(message.content ?? '').toBe('');
  });
});
