/**
 * The response cache's parts: its settings in the one config schema, a hit's exact fraction of
 * the list cost (and the audit's re-derivation of it), and each format's round trip: a plain
 * answer replayed as a stream and that stream collected again is the same answer.
 */
import { describe, expect, it } from 'vitest';
import { costOfScaled, parsePrice } from '../../src/billing/money.js';
import { costAtPrices } from '../../src/billing/pricing.js';
import type { CacheFormat } from '../../src/cache/format.js';
import { messagesFormat } from '../../src/cache/messages-format.js';
import { chatFormat, completionsFormat } from '../../src/cache/openai-formats.js';
import { SseParser } from '../../src/upstream/stream/sse.js';
import { parseOptions } from '../../src/options.js';

const roundTrip = (format: CacheFormat, body: Record<string, unknown>, request: Record<string, unknown> = {}) => {
  const usage = { prompt: 11, completion: 7 };
  const collector = format.collect();
  for (const data of new SseParser().push(new TextEncoder().encode(format.stream({ body, usage }, request)))) collector.event(data);
  return collector.body(usage);
};

describe('response cache', () => {
  it('its settings are checked by the config schema, naming the field', () => {
    expect(() => parseOptions({ cache: { hitPrice: 0.5 } })).toThrow(/cache\.hitPrice/);
    // A fraction of the list price, never more (a hit priced past it made the saved USD counter go down, and every scrape fail).
    for (const over of ['2', '1.5', '1.000000000001', '999999']) expect(() => parseOptions({ cache: { hitPrice: over } }), over).toThrow(/cache\.hitPrice/);
    for (const ok of ['0', '1', '1.000', '0.999999999999']) expect(parseOptions({ cache: { hitPrice: ok } }).cache?.hitPrice, ok).toBe(ok);
    expect(() => parseOptions({ cache: { scope: 'team' } })).toThrow(/cache\.scope/);
    expect(() => parseOptions({ cache: { ttl: 5 } })).toThrow(/ttl/);
    expect(parseOptions({ cache: {} }).cache).toEqual({ ttlSeconds: 3600, hitPrice: '0', scope: 'account', maxEntryBytes: 1048576, maxBytesPerAccount: 67108864 });
    expect(parseOptions({}).cache).toBeNull();
    const models = [{ id: 'm', upstream: 'u', pricing: { prompt: '0.000001', completion: '0.000002' }, cache: false }];
    expect(parseOptions({ upstreams: { u: { simulate: true } }, models }).models[0]?.cache).toBe(false);
    expect(() => parseOptions({ upstreams: { u: { simulate: true } }, models: [{ ...models[0], cache: { hitPrice: '-1' } }] })).toThrow(/models\[0\]\.cache/);
  });

  it('a hit costs its exact fraction of the list cost, rounded up once, and the audit re-derives it', () => {
    const parts: Array<[bigint, number]> = [
      [parsePrice('0.000001'), 11],
      [parsePrice('0.000002'), 7],
    ];
    expect(costOfScaled(parts, '1')).toBe(25_000n);
    expect(costOfScaled(parts, '0.5')).toBe(12_500n);
    expect(costOfScaled(parts, '0.3333')).toBe(8_333n);
    expect(costOfScaled(parts, '0')).toBe(0n);
    expect(costOfScaled([[1n, 1]], '0.000000000001')).toBe(1n);
    const units = { kind: 'tokens' as const, prompt: 11, completion: 7 };
    expect(costAtPrices(units, { prompt: '0.000001', completion: '0.000002', hitPrice: '0.3333' })).toBe(8_333n);
    expect(costAtPrices(units, { prompt: '0.000001', completion: '0.000002' })).toBe(25_000n);
  });

  it('chat: a plain answer with text, tool calls and two choices survives being streamed and collected', () => {
    const body = {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [
        { index: 0, message: { role: 'assistant', content: 'Hi there' }, logprobs: null, finish_reason: 'stop' },
        {
          index: 1,
          message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
          logprobs: null,
          finish_reason: 'tool_calls',
        },
      ],
      usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
    };
    expect(roundTrip(chatFormat, body, { stream_options: { include_usage: true } })).toEqual(body);
    // Without the usage chunk asked for, the usage comes from the answer model's.
    expect(roundTrip(chatFormat, body)?.usage).toEqual({ prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
  });

  it('completions: a plain answer survives being streamed and collected', () => {
    const body = { id: 'cmpl-1', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: 'Hello', logprobs: null, finish_reason: 'length' }], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } };
    expect(roundTrip(completionsFormat, body, { stream_options: { include_usage: true } })).toEqual(body);
  });

  it('Messages: text, thinking and tool_use blocks survive being streamed and collected', () => {
    const body = {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'm',
      content: [
        { type: 'thinking', thinking: 'hmm', signature: 'sig' },
        { type: 'text', text: 'Hello' },
        { type: 'tool_use', id: 'toolu_1', name: 'f', input: { a: [1, 2] } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 11, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 7 },
    };
    expect(roundTrip(messagesFormat, body)).toEqual(body);
  });

  it('a stream that never finished is not a whole answer', () => {
    const collector = chatFormat.collect();
    collector.event(JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }] }));
    expect(collector.body({ prompt: 1, completion: 1 })).toBeNull();
    const messages = messagesFormat.collect();
    messages.event(JSON.stringify({ type: 'message_start', message: { id: 'm', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 1, output_tokens: 0 } } }));
    expect(messages.body({ prompt: 1, completion: 1 })).toBeNull();
  });
});
