/**
 * The Gemini kind's translations on their own: field mappings and refusals, finish reasons,
 * a blocked prompt, several candidates, a cut stream and an error event; every chat answer,
 * chunk, Response and Responses event they write validates against OpenAI's published schemas
 * (the pinned OpenAPI document); and compose() chains any two translations.
 */
import { describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/errors.js';
import { kindOf } from '../../src/upstream/kinds/index.js';
import { compose } from '../../src/upstream/kinds/compose.js';
import { chatOverGemini } from '../../src/upstream/kinds/gemini.js';
import { toolCallId, toolCallSignature } from '../../src/upstream/kinds/gemini-ids.js';
import { responsesOverChat } from '../../src/upstream/kinds/responses-chat.js';
import type { Translation } from '../../src/upstream/kinds/types.js';
import { openaiSchemas } from '../helpers/openapi.js';

const schemas = openaiSchemas();
function conforms(schema: string, value: unknown): void {
  expect(schemas.check(schema, value), schema).toEqual([]);
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const sse = (events: unknown[]) => events.map((e) => `data: ${JSON.stringify(e)}\r\n\r\n`).join('');

/** Runs a stream translation over `text` cut into small reads; its output's `data:` payloads. */
function streamed(translation: Translation, text: string): string[] {
  const t = translation.stream();
  const bytes = encoder.encode(text);
  let out = '';
  for (let i = 0; i < bytes.length; i += 7) for (const f of t.push(bytes.slice(i, i + 7))) out += decoder.decode(f);
  for (const f of t.end()) out += decoder.decode(f);
  return out
    .split('\n\n')
    .flatMap((block) => block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)))
    .filter(Boolean);
}

function refusal(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    return err as GatewayError;
  }
  throw new Error('expected a refusal');
}

const chat = (extra: Record<string, unknown>) => ({ model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Hi' }], ...extra });

describe('chat -> Gemini request', () => {
  it('maps sampling, output, JSON schema, thinking and tool choice fields', () => {
    const { path, body } = chatOverGemini.request(
      chat({
        max_tokens: 100,
        max_completion_tokens: 80,
        n: 2,
        seed: 7,
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        stop: 'END',
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } },
        reasoning_effort: 'low',
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
        tool_choice: { type: 'function', function: { name: 'f' } },
        stream_options: { include_usage: true },
        user: 'u-1',
      }),
      false,
    );
    expect(path).toBe('/models/gemini-2.5-flash:generateContent');
    expect(body.generationConfig).toEqual({
      maxOutputTokens: 80,
      candidateCount: 2,
      seed: 7,
      presencePenalty: 0.5,
      frequencyPenalty: 0.25,
      stopSequences: ['END'],
      responseMimeType: 'application/json',
      responseJsonSchema: { type: 'object' },
      thinkingConfig: { thinkingBudget: 1024 },
    });
    // A function without parameters declares none (Gemini refuses an empty object schema).
    expect(body.tools).toEqual([{ functionDeclarations: [{ name: 'f' }] }]);
    expect(body.toolConfig).toEqual({ functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['f'] } });
    expect(chatOverGemini.request(chat({}), true).path).toBe('/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
    expect(chatOverGemini.request({ ...chat({}), model: 'tunedModels/my model' }, false).path).toBe('/tunedModels/my%20model:generateContent');
  });

  it('allowed_tools declares only the allowed functions', () => {
    const fn = (name: string) => ({ type: 'function', function: { name } });
    const { body } = chatOverGemini.request(
      chat({ tools: [fn('a'), fn('b')], tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [fn('b')] } } }),
      false,
    );
    expect(body.tools).toEqual([{ functionDeclarations: [{ name: 'b' }] }]);
    expect(body.toolConfig).toEqual({ functionCallingConfig: { mode: 'AUTO' } });
  });

  it('merges system messages into systemInstruction and consecutive tool results into one turn', () => {
    const call = (id: string, name: string) => ({ id, type: 'function', function: { name, arguments: '{"q":1}' } });
    const { body } = chatOverGemini.request(
      {
        model: 'm',
        messages: [
          { role: 'system', content: 'One.' },
          { role: 'developer', content: [{ type: 'text', text: 'Two.' }] },
          { role: 'user', content: 'Go' },
          { role: 'assistant', content: 'Calling.', tool_calls: [call('a', 'f'), call('b', 'g')] },
          { role: 'tool', tool_call_id: 'a', content: 'plain text' },
          { role: 'tool', tool_call_id: 'b', content: [{ type: 'text', text: '{"ok":true}' }] },
        ],
      },
      false,
    );
    expect(body.systemInstruction).toEqual({ parts: [{ text: 'One.' }, { text: 'Two.' }] });
    expect(body.contents).toEqual([
      { role: 'user', parts: [{ text: 'Go' }] },
      { role: 'model', parts: [{ text: 'Calling.' }, { functionCall: { name: 'f', args: { q: 1 } } }, { functionCall: { name: 'g', args: { q: 1 } } }] },
      {
        role: 'user',
        parts: [{ functionResponse: { name: 'f', response: { output: 'plain text' } } }, { functionResponse: { name: 'g', response: { ok: true } } }],
      },
    ]);
  });

  it('refuses, naming the field, what Gemini cannot carry', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [chat({ logprobs: true }), 'logprobs'],
      [chat({ top_logprobs: 3 }), 'top_logprobs'],
      [chat({ modalities: ['text', 'audio'] }), 'modalities'],
      [chat({ prediction: { type: 'content', content: 'x' } }), 'prediction'],
      [chat({ web_search_options: {} }), 'web_search_options'],
      [chat({ functions: [{ name: 'f' }] }), 'functions'],
      [chat({ store: true }), 'store'],
      [chat({ reasoning_effort: 'minimal' }), 'reasoning_effort'],
      [chat({ response_format: { type: 'grammar' } }), 'response_format.type'],
      [chat({ tools: [{ type: 'custom', custom: { name: 'c' } }] }), 'tools[0].type'],
      [{ model: 'm', messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-1' } }] }] }, 'messages[0].content[0].file.file_id'],
      [{ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'ftp://x/y.png' } }] }] }, 'messages[0].content[0].image_url.url'],
      // An http(s) URL that does not parse: refused, not a TypeError (a 500).
      [{ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://exa mple.com/a.png' } }] }] }, 'messages[0].content[0].image_url.url'],
      [{ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://[bad/a.png' } }] }] }, 'messages[0].content[0].image_url.url'],
      [{ model: 'm', messages: [{ role: 'tool', tool_call_id: 'nope', content: 'x' }] }, 'messages[0].tool_call_id'],
      [{ model: 'm', messages: [{ role: 'system', content: 'only a system message' }] }, 'messages'],
      [{ model: 'm', messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '[1]' } }] }] }, 'messages[0].tool_calls[0].function.arguments'],
    ];
    for (const [fields, param] of cases) {
      const err = refusal(() => chatOverGemini.request(fields, false));
      expect(err.status, param).toBe(400);
      expect(err.param).toBe(param);
    }
  });

  it('a kind that cannot serve an API says so', () => {
    expect(refusal(() => kindOf('gemini').translation('/embeddings')).param).toBe('model');
    expect(kindOf('gemini').auth('k')).toEqual({ 'x-goog-api-key': 'k' });
  });
});

describe('Gemini answer -> chat', () => {
  it('reads finish reasons, several candidates and usage, in OpenAI’s schema', () => {
    const answer = chatOverGemini.answer({
      candidates: [
        { content: { role: 'model', parts: [{ text: 'cut', thought: false }, { text: 'hidden', thought: true }] }, finishReason: 'MAX_TOKENS', index: 0 },
        { content: { role: 'model', parts: [] }, finishReason: 'SAFETY', index: 1 },
      ],
      usageMetadata: { promptTokenCount: 10, toolUsePromptTokenCount: 2, candidatesTokenCount: 4, thoughtsTokenCount: 1, cachedContentTokenCount: 6 },
      modelVersion: 'gemini-2.5-flash',
      responseId: 'r1',
    });
    conforms('CreateChatCompletionResponse', answer);
    expect(answer.choices).toMatchObject([
      { index: 0, message: { content: 'cut' }, finish_reason: 'length' },
      { index: 1, finish_reason: 'content_filter' },
    ]);
    expect(answer.usage).toEqual({
      prompt_tokens: 12,
      completion_tokens: 5,
      total_tokens: 17,
      prompt_tokens_details: { cached_tokens: 6 },
      completion_tokens_details: { reasoning_tokens: 1 },
    });
  });

  it('a blocked prompt is one filtered choice; a body that is no answer throws', () => {
    const answer = chatOverGemini.answer({ promptFeedback: { blockReason: 'SAFETY' }, usageMetadata: { promptTokenCount: 3 } });
    conforms('CreateChatCompletionResponse', answer);
    expect(answer.choices).toMatchObject([{ finish_reason: 'content_filter', message: { content: null } }]);
    expect(() => chatOverGemini.answer({ hello: 1 })).toThrow();
  });

  it('tool call ids are the same plain and streamed, and carry the signature back', () => {
    const part = { functionCall: { name: 'f', args: { a: 1 } }, thoughtSignature: 'ab+/cd==' };
    const body = { candidates: [{ content: { parts: [part] }, finishReason: 'STOP', index: 0 }], responseId: 'same' };
    const plain = chatOverGemini.answer(body) as { choices: Array<{ message: { tool_calls: Array<{ id: string }> } }> };
    const chunks = streamed(chatOverGemini, sse([body])).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
    const id = plain.choices[0]!.message.tool_calls[0]!.id;
    expect(chunks[0].choices[0].delta.tool_calls[0].id).toBe(id);
    expect(toolCallSignature(id)).toBe('ab+/cd==');
    expect(toolCallSignature(toolCallId('x', 0, 0, undefined))).toBeNull();
  });
});

describe('Gemini stream -> chat chunks', () => {
  const event = (text: string, finishReason?: string, usage?: Record<string, unknown>) => ({
    candidates: [{ content: { role: 'model', parts: [{ text }] }, ...(finishReason ? { finishReason } : {}), index: 0 }],
    ...(usage ? { usageMetadata: usage } : {}),
    modelVersion: 'gemini-x',
    responseId: 'r2',
  });

  it('ends with the usage chunk and [DONE], every chunk in OpenAI’s schema', () => {
    const out = streamed(chatOverGemini, sse([event('Hel', undefined, { promptTokenCount: 5 }), event('lo', 'STOP', { promptTokenCount: 5, candidatesTokenCount: 2 })]));
    expect(out.at(-1)).toBe('[DONE]');
    const chunks = out.slice(0, -1).map((d) => JSON.parse(d));
    for (const c of chunks) conforms('CreateChatCompletionStreamResponse', c);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello');
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 2 } });
  });

  it('a stream cut before any finishReason ends without [DONE]; an error event throws', () => {
    expect(streamed(chatOverGemini, sse([event('partial')]))).not.toContain('[DONE]');
    const t = chatOverGemini.stream();
    expect(() => t.push(encoder.encode(sse([{ error: { code: 500, message: 'boom', status: 'INTERNAL' } }])))).toThrow('boom');
    expect(() => chatOverGemini.stream().push(encoder.encode('data: not json\n\n'))).toThrow(GatewayError);
  });
});

describe('Responses over chat', () => {
  it('maps input items, instructions, tools and text format to chat fields', () => {
    const { path, body } = responsesOverChat.request(
      {
        model: 'm',
        instructions: 'Be brief.',
        input: [
          { role: 'user', content: [{ type: 'input_text', text: 'Hi' }, { type: 'input_image', image_url: 'data:image/png;base64,AA==' }] },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Let me check.' }] },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: 'done' },
        ],
        tools: [{ type: 'function', name: 'f', parameters: { type: 'object' }, strict: true }],
        tool_choice: { type: 'function', name: 'f' },
        text: { format: { type: 'json_schema', name: 's', schema: { type: 'object' } } },
        reasoning: { effort: 'high' },
        max_output_tokens: 9,
        store: false,
      },
      true,
    );
    expect(path).toBe('/chat/completions');
    expect(body).toEqual({
      model: 'm',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AA==' } }] },
        { role: 'assistant', content: 'Let me check.', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'done' },
      ],
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' }, strict: true } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
      response_format: { type: 'json_schema', json_schema: { name: 's', schema: { type: 'object' } } },
      reasoning_effort: 'high',
      max_completion_tokens: 9,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('refuses hosted tools and stored state, naming them', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ previous_response_id: 'resp_1' }, 'previous_response_id'],
      [{ conversation: 'conv_1' }, 'conversation'],
      [{ background: true }, 'background'],
      [{ include: ['reasoning.encrypted_content'] }, 'include'],
      [{ input: [{ type: 'reasoning', summary: [] }] }, 'input[0].type'],
      [{ input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'f' }] }] }, 'input[0].content[0].file_id'],
    ];
    for (const [extra, param] of cases) expect(refusal(() => responsesOverChat.request({ model: 'm', input: 'x', ...extra }, false)).param).toBe(param);
  });

  it('a chat answer becomes a Response in OpenAI’s schema; length is incomplete', () => {
    const response = responsesOverChat.answer({
      id: 'c',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'Hi', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
          finish_reason: 'length',
        },
      ],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5, prompt_tokens_details: { cached_tokens: 1 } },
    });
    conforms('Response', response);
    expect(response).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      output: [{ type: 'message' }, { type: 'function_call', call_id: 'call_1', name: 'f' }],
      usage: { input_tokens: 3, input_tokens_details: { cached_tokens: 1 }, output_tokens: 2 },
    });
  });

  it('Responses over Gemini, streamed: every event in OpenAI’s schema, text then a call, then completed', () => {
    const responses = compose(responsesOverChat, chatOverGemini);
    const gemini = sse([
      { candidates: [{ content: { parts: [{ text: 'Checking' }] }, index: 0 }], responseId: 'r3' },
      { candidates: [{ content: { parts: [{ functionCall: { name: 'f', args: { x: 1 } } }] }, finishReason: 'STOP', index: 0 }], usageMetadata: { promptTokenCount: 4, candidatesTokenCount: 3 }, responseId: 'r3' },
    ]);
    const events = streamed(responses, gemini).map((d) => JSON.parse(d));
    for (const e of events) conforms('ResponseStreamEvent', e);
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.at(-1).response).toMatchObject({ status: 'completed', usage: { input_tokens: 4, output_tokens: 3 } });
    // Cut before Gemini's finish: no terminal event.
    const cut = streamed(responses, sse([{ candidates: [{ content: { parts: [{ text: 'Check' }] }, index: 0 }] }])).map((d) => JSON.parse(d));
    expect(cut.map((e) => e.type)).not.toContain('response.completed');
  });
});

describe("a Gemini upstream's error for the client", () => {
  it('a 429 with no error type (Gemini names a status word) is a rate limit, not a bad request; a named type is kept', async () => {
    const { upstreamErrorOf } = await import('../../src/upstream/answer-errors.js');
    const same = (t: string) => t;
    const gemini = JSON.stringify({ error: { code: 429, message: 'Resource has been exhausted (e.g. check quota).', status: 'RESOURCE_EXHAUSTED' } });
    const err = upstreamErrorOf(429, gemini, 'gem', same, '7');
    expect(err.toJSON().error).toMatchObject({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', message: 'Resource has been exhausted (e.g. check quota).' });
    expect(err.status).toBe(429);
    expect(err.headers['retry-after']).toBe('7');
    const named = upstreamErrorOf(429, JSON.stringify({ error: { message: 'slow down', type: 'requests', code: 'rate_limit_exceeded' } }), 'oa', same);
    expect(named.type).toBe('requests');
    expect(upstreamErrorOf(400, gemini.replace('RESOURCE_EXHAUSTED', 'INVALID_ARGUMENT'), 'gem', same).type).toBe('invalid_request_error');
  });
});

describe('a refusal by the second of two translations names the field the client sent', () => {
  it('Responses over Gemini and over Anthropic; Messages over Gemini', async () => {
    const { chatOverMessages, messagesOverChat } = await import('../../src/upstream/kinds/messages/index.js');
    const responsesOverGemini = compose(responsesOverChat, chatOverGemini);
    const responsesOverAnthropic = compose(responsesOverChat, chatOverMessages);
    const messagesOverGemini = compose(messagesOverChat, chatOverGemini);
    const effort = refusal(() => responsesOverGemini.request({ model: 'g', input: 'hi', reasoning: { effort: 'minimal' } }, false));
    expect(effort.param).toBe('reasoning.effort');
    expect(effort.message).not.toContain("'reasoning_effort'");
    expect(refusal(() => responsesOverAnthropic.request({ model: 'a', input: 'hi', text: { verbosity: 'low' } }, false)).param).toBe('text.verbosity');
    const budget = refusal(() => responsesOverAnthropic.request({ model: 'a', input: 'hi', reasoning: { effort: 'high' }, max_output_tokens: 100 }, false));
    expect(budget.param).toBe('reasoning.effort');
    expect(budget.message).toContain('max_output_tokens');
    expect(budget.message).not.toContain('max_completion_tokens');
    const unknownCall = [{ type: 'function_call_output', call_id: 'nope', output: 'x' }];
    expect(refusal(() => responsesOverGemini.request({ model: 'g', input: unknownCall }, false)).param).toBe('input');
    const toolResult = [
      { role: 'user', content: 'hi' },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'nope', content: 'x' }] },
    ];
    const m = refusal(() => messagesOverGemini.request({ model: 'g', max_tokens: 10, system: 'be brief', messages: toolResult }, false));
    expect(m.param).toBe('messages');
  });
});

describe('Messages thinking over Gemini: the budget the client named', () => {
  it('goes as named (not as an effort size), off when disabled; an OpenAI upstream sees only the effort', async () => {
    const { messagesOverChat } = await import('../../src/upstream/kinds/messages/index.js');
    const messagesOverGemini = compose(messagesOverChat, chatOverGemini);
    const ask = (thinking?: unknown) => ({ model: 'g', max_tokens: 20_000, messages: [{ role: 'user', content: 'hi' }], ...(thinking ? { thinking } : {}) });
    const configOf = (thinking?: unknown) => messagesOverGemini.request(ask(thinking), false).body.generationConfig as Record<string, unknown>;
    expect(configOf({ type: 'enabled', budget_tokens: 3000 }).thinkingConfig).toEqual({ thinkingBudget: 3000 });
    expect(configOf({ type: 'enabled', budget_tokens: 12_345 }).thinkingConfig).toEqual({ thinkingBudget: 12_345 });
    // Past what every thinking Gemini model takes: the largest, as the effort `high` sends.
    expect(configOf({ type: 'enabled', budget_tokens: 32_000 }).thinkingConfig).toEqual({ thinkingBudget: 24_576 });
    expect(configOf({ type: 'disabled' }).thinkingConfig).toEqual({ thinkingBudget: 0 });
    expect(configOf().thinkingConfig).toBeUndefined();
    // Over an OpenAI upstream the chat request goes out as JSON: the budget is not in it.
    const chat = messagesOverChat.request(ask({ type: 'enabled', budget_tokens: 3000 }), false).body;
    expect(JSON.parse(JSON.stringify(chat))).toMatchObject({ reasoning_effort: 'medium' });
    expect(JSON.stringify(chat)).not.toContain('3000');
  });
});

describe('a translated Response echoes the request, as OpenAI’s does', () => {
  const request = {
    model: 'g',
    input: 'hi',
    instructions: 'Be brief.',
    max_output_tokens: 50,
    temperature: 0.2,
    top_p: 0.9,
    tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: {} } }],
    tool_choice: 'required',
    parallel_tool_calls: false,
    metadata: { team: 'a' },
  };
  const echoed = {
    instructions: 'Be brief.',
    max_output_tokens: 50,
    temperature: 0.2,
    top_p: 0.9,
    tools: [{ type: 'function', name: 'f', description: null, parameters: { type: 'object', properties: {} }, strict: null }],
    tool_choice: 'required',
    parallel_tool_calls: false,
    metadata: { team: 'a' },
  };
  const responses = compose(responsesOverChat, chatOverGemini);

  it('plain and streamed, in OpenAI’s schema', () => {
    const plain = responses.answer({ candidates: [{ content: { role: 'model', parts: [{ text: 'Hi' }] }, finishReason: 'STOP', index: 0 }], responseId: 'r1' }, request);
    conforms('Response', plain);
    expect(plain).toMatchObject(echoed);
    const t = responses.stream(request);
    let out = '';
    for (const f of t.push(encoder.encode(sse([{ candidates: [{ content: { parts: [{ text: 'Hi' }] }, finishReason: 'STOP', index: 0 }], usageMetadata: { promptTokenCount: 4, candidatesTokenCount: 1 }, responseId: 'r2' }])))) out += decoder.decode(f);
    for (const f of t.end()) out += decoder.decode(f);
    const events = out.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
    const completed = events.find((e) => e.type === 'response.completed');
    conforms('ResponseStreamEvent', completed);
    expect(events[0].response).toMatchObject(echoed);
    expect(completed.response).toMatchObject(echoed);
  });
});
