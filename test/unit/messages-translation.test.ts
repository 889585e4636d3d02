/**
 * The Messages <-> chat translations, case by case: what each block and field becomes, what
 * is refused by name, and how a stream's events map (usage in the finish chunk, reasoning,
 * a stream without usage, a cut stream, an error event).
 */
import { describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/errors.js';
import { messagesUsage } from '../../src/upstream/answers/messages.js';
import { ChatToMessagesEvents } from '../../src/upstream/kinds/messages/chat-to-events.js';
import { MessagesToChatEvents } from '../../src/upstream/kinds/messages/events-to-chat.js';
import { messagesRequestOf } from '../../src/upstream/kinds/messages/from-chat.js';
import { chatRequestOf, messageOf } from '../../src/upstream/kinds/messages/to-chat.js';
import { streamEvents } from '../helpers/anthropic-shapes.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
const sse = (events: unknown[]) => enc.encode(events.map((e) => `data: ${typeof e === 'string' ? e : JSON.stringify(e)}\n\n`).join(''));
const text = (parts: Uint8Array[]) => parts.map((p) => dec.decode(p)).join('');
const refusal = (fn: () => unknown): GatewayError => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    return err as GatewayError;
  }
  throw new Error('expected a refusal');
};

describe('Messages request as chat', () => {
  const base = { model: 'm', max_tokens: 10 };

  it('blocks become parts; tool results come first as tool messages; earlier thinking is left out', () => {
    const out = chatRequestOf(
      {
        ...base,
        system: [{ type: 'text', text: 'A' }, { type: 'text', text: 'B' }],
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'look' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBOR' } },
              { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } },
              { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBER' }, title: 'a.pdf' },
              { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'plain doc' } },
            ],
          },
          { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: 's' }, { type: 'tool_use', id: 't1', name: 'f', input: { a: 1 } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'boom', is_error: true }, { type: 'text', text: 'and?' }] },
        ],
        tool_choice: { type: 'any', disable_parallel_tool_use: true },
        tools: [{ name: 'f', input_schema: { type: 'object' } }],
        stop_sequences: ['END'],
        metadata: { user_id: 'u1' },
        thinking: { type: 'enabled', budget_tokens: 5000 },
      },
      true,
    );
    expect(out.messages).toEqual([
      { role: 'system', content: 'A\n\nB' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBOR' } },
          { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
          { type: 'file', file: { filename: 'a.pdf', file_data: 'data:application/pdf;base64,JVBER' } },
          { type: 'text', text: 'plain doc' },
        ],
      },
      { role: 'assistant', content: null, tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
      { role: 'tool', tool_call_id: 't1', content: 'Error: boom' },
      { role: 'user', content: [{ type: 'text', text: 'and?' }] },
    ]);
    expect(out).toMatchObject({ tool_choice: 'required', parallel_tool_calls: false, stop: ['END'], user: 'u1', reasoning_effort: 'medium', max_completion_tokens: 10, stream_options: { include_usage: true } });
    expect(out.max_tokens).toBeUndefined();
  });

  it('the cap goes as max_completion_tokens without thinking too (reasoning models refuse max_tokens)', () => {
    const out = chatRequestOf({ ...base, messages: [{ role: 'user', content: 'hi' }] }, false);
    expect(out.max_completion_tokens).toBe(10);
    expect(out.max_tokens).toBeUndefined();
  });

  it('what chat cannot carry is refused by name', () => {
    const hi = [{ role: 'user', content: 'hi' }];
    expect(refusal(() => chatRequestOf({ ...base, messages: hi, top_k: 5 }, false)).param).toBe('top_k');
    expect(refusal(() => chatRequestOf({ ...base, messages: hi, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, false)).param).toBe('tools[0]');
    const fileDoc = [{ role: 'user', content: [{ type: 'document', source: { type: 'file', file_id: 'f' } }] }];
    expect(refusal(() => chatRequestOf({ ...base, messages: fileDoc }, false)).param).toBe('messages[0].content[0]');
  });

  it('a chat answer without usage reports none (zero input), and the reader takes it as no report', () => {
    const m = messageOf({ id: 'chatcmpl-1', model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'length' }] });
    expect(m.stop_reason).toBe('max_tokens');
    expect(messagesUsage(m.usage)).toBeNull();
    expect(messagesUsage({ input_tokens: 3, output_tokens: 2, cache_read_input_tokens: 10, cache_creation_input_tokens: 5 })).toEqual({ prompt: 18, completion: 2, cachedPrompt: 10, cacheWrite: 5 });
  });
});

describe('chat request as Messages', () => {
  it('images by data URL or link; consecutive tool messages in one user turn', () => {
    const out = messagesRequestOf(
      {
        model: 'm',
        messages: [
          { role: 'developer', content: 'D' },
          { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/' } }, { type: 'image_url', image_url: { url: 'https://x/y.png' } }] },
          { role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{}' } }, { id: 'b', type: 'function', function: { name: 'g', arguments: '{"k":2}' } }] },
          { role: 'tool', tool_call_id: 'a', content: '1' },
          { role: 'tool', tool_call_id: 'b', content: '2' },
        ],
        stop: 'X',
        n: 1,
      },
      false,
    );
    expect(out).toEqual({
      model: 'm',
      max_tokens: 4096,
      system: 'D',
      stop_sequences: ['X'],
      messages: [
        { role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: '/9j/' } }, { type: 'image', source: { type: 'url', url: 'https://x/y.png' } }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'a', name: 'f', input: {} }, { type: 'tool_use', id: 'b', name: 'g', input: { k: 2 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'a', content: '1' }, { type: 'tool_result', tool_use_id: 'b', content: '2' }] },
      ],
    });
  });

  it('what Messages cannot carry is refused by name', () => {
    const hi = [{ role: 'user', content: 'hi' }];
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: hi, n: 2 }, false)).param).toBe('n');
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: hi, seed: 1 }, false)).param).toBe('seed');
    // Anthropic takes temperature and top_p from 0 to 1 (chat's temperature goes to 2).
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: hi, temperature: 1.5 }, false)).param).toBe('temperature');
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: hi, top_p: -0.1 }, false)).param).toBe('top_p');
    expect(messagesRequestOf({ model: 'm', messages: hi, temperature: 1, top_p: 0 }, false)).toMatchObject({ temperature: 1, top_p: 0 });
    const audio = [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'input_audio', input_audio: { data: 'AA', format: 'wav' } }] }];
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: audio }, false)).param).toBe('messages[0].content[1]');
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: hi, max_tokens: 500, reasoning_effort: 'low' }, false)).param).toBe('reasoning_effort');
    // An effort with no budget (Responses' minimal, xhigh) is refused, not thought at medium's size.
    for (const effort of ['minimal', 'xhigh']) {
      expect(refusal(() => messagesRequestOf({ model: 'm', messages: hi, max_tokens: 20_000, reasoning_effort: effort }, false)).param).toBe('reasoning_effort');
    }
  });

  it('refuses what it would otherwise drop: a non-text system part, an assistant function_call or audio', () => {
    const hi = { role: 'user', content: 'hi' };
    const image = { type: 'image_url', image_url: { url: 'https://x/a.png' } };
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: [{ role: 'system', content: [{ type: 'text', text: 'see' }, image] }, hi] }, false)).param).toBe('messages[0].content[1]');
    const legacy = { role: 'assistant', content: null, function_call: { name: 'f', arguments: '{"a":1}' } };
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: [hi, legacy, hi] }, false)).param).toBe('messages[1].function_call');
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: [hi, { role: 'assistant', content: 'x', audio: { id: 'audio_1' } }, hi] }, false)).param).toBe('messages[1].audio');
    // Text parts of a system message still join into the system prompt.
    expect(messagesRequestOf({ model: 'm', messages: [{ role: 'system', content: [{ type: 'text', text: 'A' }, { type: 'text', text: 'B' }] }, hi] }, false)).toMatchObject({ system: 'AB' });
  });

  it('a data URL with parameters goes as base64, never as a link; service_tier auto and default are no refusal', () => {
    const out = messagesRequestOf({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;name=a.png;base64,iVBORw0KGgo=' } }] }] }, false);
    expect((out.messages as Array<{ content: unknown[] }>)[0]!.content[0]).toEqual({ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } });
    const upper = messagesRequestOf({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;BASE64,iVBORw0KGgo=' } }] }] }, false);
    expect((upper.messages as Array<{ content: Array<{ source: unknown }> }>)[0]!.content[0]!.source).toEqual({ type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' });
    const pdf = messagesRequestOf({ model: 'm', messages: [{ role: 'user', content: [{ type: 'file', file: { file_data: 'data:application/pdf;name=a.pdf;base64,JVBERi0=' } }] }] }, false);
    expect((pdf.messages as Array<{ content: unknown[] }>)[0]!.content[0]).toEqual({ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } });
    const notBase64 = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png,rawbytes' } }] }];
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: notBase64 }, false)).param).toBe('messages[0].content[0]');
    const hi = [{ role: 'user', content: 'hi' }];
    for (const tier of ['auto', 'default', 'standard_only']) expect(messagesRequestOf({ model: 'm', messages: hi, service_tier: tier }, false)).not.toHaveProperty('service_tier');
    expect(refusal(() => messagesRequestOf({ model: 'm', messages: hi, service_tier: 'flex' }, false)).param).toBe('service_tier');
  });

  it("effort none is no thinking (Anthropic's default), not a budget", () => {
    const out = messagesRequestOf({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5000, reasoning_effort: 'none' }, false);
    expect(out.thinking).toBeUndefined();
    // Below every budget, still no refusal: nothing thinks.
    expect(messagesRequestOf({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 100, reasoning_effort: 'none' }, false).thinking).toBeUndefined();
  });
});

describe('chat stream as Messages events', () => {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) => ({
    id: 'chatcmpl-9',
    model: 'm',
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...extra,
  });

  it('reasoning then text as two blocks; usage in the finish chunk does not end the message: a later report is the final one, at [DONE]', () => {
    const t = new ChatToMessagesEvents();
    const usage = { prompt_tokens: 100, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 60 } };
    const later = { prompt_tokens: 100, completion_tokens: 12, prompt_tokens_details: { cached_tokens: 60 } };
    const out = text([...t.push(sse([chunk({ role: 'assistant', reasoning_content: 'think' }), chunk({ content: 'Hi' }), chunk({}, 'stop', { usage })]))]);
    expect(streamEvents(out).map((e) => e.type)).not.toContain('message_delta');
    const rest = text([...t.push(sse([JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: later })])), ...t.push(sse(['[DONE]']))]);
    const events = streamEvents(out + rest);
    expect(events.map((e) => e.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(events[4]).toMatchObject({ index: 1, content_block: { type: 'text' } });
    expect(events[7]).toMatchObject({ delta: { stop_reason: 'end_turn' }, usage: { input_tokens: 40, cache_read_input_tokens: 60, output_tokens: 12 } });
    expect(text(t.end())).toBe('');
  });

  it('no usage chunk: the message ends at [DONE] with no usage reported; a cut stream gets no message_stop', () => {
    const t = new ChatToMessagesEvents();
    const events = streamEvents(text([...t.push(sse([chunk({ content: 'a' }), chunk({}, 'length'), '[DONE]'])), ...t.end()]));
    expect(events.at(-2)).toMatchObject({ type: 'message_delta', delta: { stop_reason: 'max_tokens' } });
    expect(messagesUsage(events.at(-2)!.usage)).toBeNull();
    const cut = new ChatToMessagesEvents();
    const partial = streamEvents(text([...cut.push(sse([chunk({ content: 'a' })])), ...cut.end()]));
    expect(partial.some((e) => e.type === 'message_stop')).toBe(false);
  });

  it('content sent as parts and arguments sent as an object reach the client as text, as they are billed', () => {
    const t = new ChatToMessagesEvents();
    const call = { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: { city: 'Paris' } } };
    const events = streamEvents(text([...t.push(sse([chunk({ content: [{ type: 'text', text: 'Hel' }, { type: 'text', text: 'lo' }] }), chunk({ tool_calls: [call] }), chunk({}, 'tool_calls'), '[DONE]'])), ...t.end()]));
    const deltas = events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta);
    expect(deltas).toEqual([{ type: 'text_delta', text: 'Hello' }, { type: 'input_json_delta', partial_json: '{"city":"Paris"}' }]);
    // Billed: the text, the tool's name (in the block's start) and its arguments' JSON.
    expect(t.account.output().text).toBe('Hellof{"city":"Paris"}');
    // And the same answer plain.
    const m = messageOf({ id: 'chatcmpl-p', model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: [{ type: 'text', text: 'Hello' }], tool_calls: [call] }, finish_reason: 'tool_calls' }] });
    expect(m.content).toEqual([{ type: 'text', text: 'Hello' }, { type: 'tool_use', id: 'call_1', name: 'f', input: { city: 'Paris' } }]);
  });
});

describe('a chat refusal as Messages', () => {
  const said = "I'm sorry, I can't help with that.";
  it('plain: the refusal is the answer text, stopped as `refusal`', () => {
    const m = messageOf({ id: 'chatcmpl-r', model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: said }, finish_reason: 'stop' }] });
    expect(m).toMatchObject({ content: [{ type: 'text', text: said }], stop_reason: 'refusal' });
  });

  it('streamed: the refusal deltas are a text block, and the message stops as `refusal`', () => {
    const t = new ChatToMessagesEvents();
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({ id: 'chatcmpl-r', model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] });
    const out = text([...t.push(sse([chunk({ role: 'assistant', content: null, refusal: '' }), chunk({ refusal: "I'm sorry, " }), chunk({ refusal: "I can't help with that." }), chunk({}, 'stop'), '[DONE]'])), ...t.end()]);
    const events = streamEvents(out);
    const deltas = events.filter((e) => e.type === 'content_block_delta').map((e) => (e.delta as { text: string }).text);
    expect(deltas.join('')).toBe(said);
    expect(events.find((e) => e.type === 'content_block_start')).toMatchObject({ content_block: { type: 'text' } });
    expect(events.find((e) => e.type === 'message_delta')).toMatchObject({ delta: { stop_reason: 'refusal' } });
    expect(events.at(-1)!.type).toBe('message_stop');
  });
});

describe('Messages events as a chat stream', () => {
  const ev = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

  it('thinking as reasoning_content; an error event throws the upstream failure', () => {
    const t = new MessagesToChatEvents();
    const out = text(
      t.push(
        enc.encode(
          ev('message_start', { message: { id: 'msg_1', model: 'm', usage: { input_tokens: 5, output_tokens: 1 } } }) +
            ev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '' } }) +
            ev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'hmm' } }) +
            ev('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: 'sig' } }),
        ),
      ),
    );
    expect(out).toContain('"reasoning_content":"hmm"');
    expect(out).not.toContain('sig');
    const err = refusal(() => t.push(enc.encode(ev('error', { error: { type: 'overloaded_error', message: 'Overloaded' } }))));
    expect(err.code).toBe('upstream_error');
    expect(err.message).toBe('Overloaded');
  });

  it("what a block's start carries (first text, thinking, a tool's whole input) reaches the client, as the account counts it", () => {
    const t = new MessagesToChatEvents();
    const out = text(
      t.push(
        enc.encode(
          ev('message_start', { message: { id: 'msg_1', model: 'm', usage: { input_tokens: 5, output_tokens: 1 } } }) +
            ev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: 'first thought' } }) +
            ev('content_block_stop', { index: 0 }) +
            ev('content_block_start', { index: 1, content_block: { type: 'text', text: 'Initial words. ' } }) +
            ev('content_block_delta', { index: 1, delta: { type: 'text_delta', text: 'more' } }) +
            ev('content_block_stop', { index: 1 }) +
            ev('content_block_start', { index: 2, content_block: { type: 'tool_use', id: 'toolu_1', name: 'f', input: { city: 'Paris' } } }) +
            ev('content_block_stop', { index: 2 }) +
            ev('content_block_start', { index: 3, content_block: { type: 'tool_use', id: 'toolu_2', name: 'g', input: {} } }) +
            ev('content_block_delta', { index: 3, delta: { type: 'input_json_delta', partial_json: '{"k":1}' } }) +
            ev('content_block_stop', { index: 3 }) +
            ev('message_delta', { delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 20 } }) +
            ev('message_stop', {}),
        ),
      ),
    );
    const deltas = out
      .split('\n\n')
      .filter((f) => f.startsWith('data: {'))
      .map((f) => JSON.parse(f.slice(6)).choices?.[0]?.delta ?? {});
    expect(deltas.map((d) => d.reasoning_content ?? '').join('')).toBe('first thought');
    expect(deltas.map((d) => d.content ?? '').join('')).toBe('Initial words. more');
    const args = (index: number) => deltas.flatMap((d) => d.tool_calls ?? []).filter((c) => c.index === index).map((c) => c.function.arguments).join('');
    expect(JSON.parse(args(0))).toEqual({ city: 'Paris' });
    // Anthropic's own empty start input is followed by its deltas: not sent twice.
    expect(JSON.parse(args(1))).toEqual({ k: 1 });
  });
});

describe('the Messages translators hold an error back behind the output of its read', () => {
  const enc = (s: string) => new TextEncoder().encode(s);
  const dec = (parts: Uint8Array[]) => parts.map((p) => new TextDecoder().decode(p)).join('');

  it('chat -> Messages: the text before an error event goes out first, then the error is thrown', () => {
    const t = new ChatToMessagesEvents();
    const chunk = (delta: Record<string, unknown>) => `data: ${JSON.stringify({ id: 'c1', model: 'm', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
    const read = chunk({ role: 'assistant', content: 'Hello' }) + `data: ${JSON.stringify({ error: { message: 'overloaded' } })}\n\n`;
    const out = dec(t.push(enc(read)));
    expect(out).toContain('"text":"Hello"');
    expect(() => t.end()).toThrow();
  });

  it('Messages -> chat: the text before an error event goes out first, then the error is thrown', () => {
    const t = new MessagesToChatEvents();
    const ev = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    const read =
      ev('message_start', { message: { id: 'msg_1', model: 'claude', usage: { input_tokens: 3, output_tokens: 1 } } }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello' } }) +
      ev('error', { error: { type: 'overloaded_error', message: 'Overloaded' } });
    const out = dec(t.push(enc(read)));
    expect(out).toContain('"content":"Hello"');
    expect(() => t.push(enc(''))).toThrow();
  });
});

describe('Anthropic thinking blocks survive a chat client’s tool loop', () => {
  const ev = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

  it('a plain answer carries them signed in thinking_blocks; the message sent back gives them back first in its turn', async () => {
    const { chatAnswerOf } = await import('../../src/upstream/kinds/messages/from-chat.js');
    const chat = chatAnswerOf({
      id: 'msg_t',
      model: 'm',
      content: [
        { type: 'thinking', thinking: 'look it up', signature: 'SIG1' },
        { type: 'redacted_thinking', data: 'ENC' },
        { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { q: 'x' } },
      ],
      stop_reason: 'tool_use',
      usage: { input_tokens: 5, output_tokens: 9 },
    }) as { choices: Array<{ message: Record<string, unknown> }> };
    const message = chat.choices[0]!.message;
    expect(message.reasoning_content).toBe('look it up');
    expect(message.thinking_blocks).toEqual([
      { type: 'thinking', thinking: 'look it up', signature: 'SIG1' },
      { type: 'redacted_thinking', data: 'ENC' },
    ]);
    // The agent's next turn: its assistant message as it came, then the tool's result.
    const next = messagesRequestOf(
      { model: 'm', max_completion_tokens: 4000, reasoning_effort: 'low', messages: [{ role: 'user', content: 'go' }, message, { role: 'tool', tool_call_id: 'toolu_1', content: '42' }] },
      false,
    );
    expect((next.messages as Array<{ content: unknown }>)[1]!.content).toEqual([
      { type: 'thinking', thinking: 'look it up', signature: 'SIG1' },
      { type: 'redacted_thinking', data: 'ENC' },
      { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { q: 'x' } },
    ]);
    const bad = refusal(() => messagesRequestOf({ model: 'm', messages: [{ role: 'assistant', content: 'x', thinking_blocks: [{ type: 'thinking', thinking: 'no signature' }] }] }, false));
    expect(bad.param).toBe('messages[0].thinking_blocks[0]');
  });

  it('a stream sends each block whole and signed at its end, after its text as reasoning_content', () => {
    const t = new MessagesToChatEvents();
    const out = text([
      ...t.push(
        enc.encode(
          ev('message_start', { message: { id: 'msg_2', model: 'm', usage: { input_tokens: 5, output_tokens: 1 } } }) +
            ev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '' } }) +
            ev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'look ' } }) +
            ev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'it up' } }) +
            ev('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: 'SIG2' } }) +
            ev('content_block_stop', { index: 0 }) +
            ev('content_block_start', { index: 1, content_block: { type: 'redacted_thinking', data: 'ENC2' } }) +
            ev('content_block_stop', { index: 1 }) +
            ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 9 } }) +
            ev('message_stop', {}),
        ),
      ),
      ...t.end(),
    ]);
    const deltas = out
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => (JSON.parse(l.slice(6)) as { choices: Array<{ delta: Record<string, unknown> }> }).choices[0]?.delta)
      .filter(Boolean);
    expect(deltas.filter((d) => d!.thinking_blocks).map((d) => d!.thinking_blocks)).toEqual([
      [{ type: 'thinking', thinking: 'look it up', signature: 'SIG2' }],
      [{ type: 'redacted_thinking', data: 'ENC2' }],
    ]);
  });
});

describe('thinking blocks sent back are input: the hold counts them', () => {
  it('the prompt bound and the counted estimate grow with an assistant message’s thinking_blocks', async () => {
    const { promptTokensBound, estimatePromptTokens } = await import('../../src/billing/tokens.js');
    const { loadTokenizer } = await import('../helpers/billing.js');
    const tokenizer = await loadTokenizer();
    const call = { id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{}' } };
    const turn = (blocks?: unknown[]) => ({ messages: [{ role: 'user', content: 'go' }, { role: 'assistant', content: null, tool_calls: [call], ...(blocks ? { thinking_blocks: blocks } : {}) }] });
    const thought = 'I should look this up before answering. '.repeat(500);
    const blocks = [{ type: 'thinking', thinking: thought, signature: 'SIG' }, { type: 'redacted_thinking', data: 'ENCRYPTED'.repeat(100) }];
    expect(promptTokensBound(turn(blocks)) - promptTokensBound(turn())).toBeGreaterThanOrEqual(Buffer.byteLength(thought));
    expect(estimatePromptTokens(tokenizer, turn(blocks)) - estimatePromptTokens(tokenizer, turn())).toBeGreaterThanOrEqual(tokenizer.count(thought));
  });
});
