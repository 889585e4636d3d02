/**
 * Output guardrails over the test upstream: a PII string that arrives in three separate reads
 * (chat and legacy completions) is redacted in what the client receives; a plugin's own output
 * guardrail (onOutput) sees a plain answer's texts, redacts or blocks them, is asked once before
 * a stream and its rewrite applies to what the stream releases, and fails closed when it
 * throws; the access line names each guardrail that acted on the answer.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import { createLogger } from '../../src/observability/logs.js';
import type { OnOutputArgs } from '../../src/pipeline/hooks.js';
import type { Stores } from '../../src/stores/types.js';
import { eventually, MODEL, makeGateway, sseData, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gateway: Gateway;
let stores: Stores;
let devKey: string;
const lines: Array<Record<string, unknown>> = [];
const seen: Array<{ texts: readonly string[]; stream: boolean; path: string }> = [];

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  devKey = setup.devKey;
  setup.options.logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  setup.options.guardrails = [{ id: 'pii-out', kind: 'pii', action: 'redact', on: ['output'] }];
  setup.options.plugins = [
    {
      name: 'secrets',
      onOutput(args: OnOutputArgs) {
        seen.push({ texts: args.texts, stream: args.stream, path: args.path });
        const prompt = args.request.headers.get('x-test-mode');
        if (prompt === 'explode') throw new Error('classifier down');
        if (args.texts.some((t) => t.includes('TOPSECRET'))) args.block('topsecret');
        args.redact('tickets', (t) => t.replace(/\bTKT-\d{3}\b/g, '[TICKET]'));
        // A rewrite with a bug: it throws on text it did not expect.
        if (prompt === 'fragile') {
          args.redact('fragile', (t) => {
            if (t.includes('ñ')) throw new Error('unexpected character');
            return t;
          });
        }
      },
    },
  ];
  ({ gateway, stores } = await makeGateway(setup.options));
});

afterAll(async () => {
  await gateway?.dispose();
  await stores?.close();
  await up?.close();
});

beforeEach(() => {
  seen.length = 0;
  lines.length = 0;
});

const post = async (path: string, body: Record<string, unknown>, mode = ''): Promise<Response> =>
  gateway.fetch(
    new Request(`http://gw/v1${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json', 'x-test-mode': mode },
      body: JSON.stringify({ model: MODEL, ...body }),
    }),
  );

const chatText = (raw: string) =>
  sseData(raw)
    .filter((d) => d !== '[DONE]')
    .flatMap((d) => JSON.parse(d).choices ?? [])
    .map((c: { delta?: { content?: string }; text?: string }) => c.delta?.content ?? c.text ?? '')
    .join('');

describe('a PII string arriving in three separate reads', () => {
  it('chat: redacted in what the client receives', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['Mail jane.d', 'oe@exam', 'ple.com now'], delayMs: 20 });
    const res = await post('/chat/completions', { stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const raw = await res.text();
    expect(chatText(raw)).toBe('Mail [REDACTED:EMAIL] now');
    expect(raw).not.toContain('oe@exam');
  });

  it('legacy completions: redacted in what the client receives', async () => {
    up.setBehavior({ kind: 'completion', chunks: ['Card 4111 11', '11 1111 ', '1111 ok'] });
    const res = await post('/completions', { stream: true, prompt: 'hi' });
    const raw = await res.text();
    expect(chatText(raw)).toBe('Card [REDACTED:CREDIT_CARD] ok');
  });
});

describe('a plugin output guardrail (onOutput)', () => {
  it('sees a plain answer\'s texts and its redaction is what the client gets', async () => {
    up.setBehavior({ kind: 'json', content: 'See TKT-123 or write to a@b.io' });
    const res = await post('/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]!.message.content).toBe('See [TICKET] or write to [REDACTED:EMAIL]');
    expect(seen).toEqual([{ texts: ['See TKT-123 or write to a@b.io'], stream: false, path: '/chat/completions' }]);
    await eventually(() => lines.some((l) => l.msg === 'request' || l.guardrails !== undefined), 'the access line');
    const access = lines.find((l) => Array.isArray(l.guardrails));
    expect(access?.guardrails).toEqual([
      { id: 'pii-out', action: 'redact', on: 'output' },
      { id: 'tickets', action: 'redact', on: 'output' },
    ]);
  });

  it('a block ends a plain answer with content_filter, its text withheld', async () => {
    up.setBehavior({ kind: 'json', content: 'The TOPSECRET plan' });
    const res = await post('/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
    const body = (await res.json()) as { choices: Array<{ message: { content: string }; finish_reason: string }> };
    expect(body.choices[0]).toMatchObject({ finish_reason: 'content_filter', message: { content: '' } });
  });

  it('is asked once before a stream, and its rewrite applies to what the stream releases', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['Ticket ', 'TKT-4', '56 done'], delayMs: 5 });
    const res = await post('/chat/completions', { stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(chatText(await res.text())).toBe('Ticket [TICKET] done');
    expect(seen).toEqual([{ texts: [], stream: true, path: '/chat/completions' }]);
  });

  it('a hook that throws fails closed: 503 guardrail_unavailable, the answer withheld', async () => {
    up.setBehavior({ kind: 'json', content: 'fine' });
    const res = await post('/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }, 'explode');
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ code: 'guardrail_unavailable', metadata: { guardrail: 'secrets' } });
  });

  it("a rewrite that throws fails closed too, plain and streamed, as the guardrail's failure, not the upstream's", async () => {
    for (let i = 0; i < 3; i++) {
      up.setBehavior({ kind: 'json', content: 'mañana' });
      const plain = await post('/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }, 'fragile');
      expect(plain.status).toBe(503);
      expect(((await plain.json()) as { error: unknown }).error).toMatchObject({ code: 'guardrail_unavailable', metadata: { guardrail: 'fragile' } });
      up.setBehavior({ kind: 'stream', chunks: ['hasta ', 'mañana'], delayMs: 5 });
      const streamed = await post('/chat/completions', { stream: true, messages: [{ role: 'user', content: 'hi' }] }, 'fragile');
      const raw = await streamed.text();
      expect(raw).toContain('guardrail_unavailable');
      expect(raw).not.toContain('upstream_error');
    }
    up.setBehavior({ kind: 'json', content: 'fine' });
    const after = await post('/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
    expect(after.status).toBe(200);
  });
});
