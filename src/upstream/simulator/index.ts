/**
 * The built-in upstream simulator (`upstreams.X = {simulate: true}`): a deterministic
 * OpenAI-compatible upstream in process, for the demo and the tests. Same prompt, same answer.
 */
import { randomUUID } from 'node:crypto';
import { contentText, type Tokenizer } from '../../billing/tokens.js';
import type { Upstream, UpstreamCall, UpstreamResponse } from '../client.js';
import { jsonResponse, streamResponse } from '../local-response.js';
import { createGeminiSimulator } from './gemini.js';
import { createMediaSimulator, type MediaSimulatorOptions } from './media.js';
import { simulateMessages } from './messages.js';
import { PromptCache } from './prompt-cache.js';
import { sleep } from '../sleep.js';

export interface SimulatorOptions extends MediaSimulatorOptions {
  chunkDelayMs: number;
}

const encoder = new TextEncoder();

function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown } | null;
    if (m && m.role === 'user') return contentText(m.content);
  }
  return '';
}

function simulatedAnswer(prompt: string, maxTokens: number | undefined, tokenizer: Tokenizer): string {
  const topic = prompt.trim().split(/\s+/).slice(0, 12).join(' ') || 'your message';
  const words = `Hello! This is the model-gateway simulator answering "${topic}". It echoes a short, deterministic reply so that you can try streaming, metering and limits without a real provider.`.split(
    ' ',
  );
  const whole = words.join(' ');
  // The whole reply fits almost always (the gateway always sends a cap): counted once.
  if (maxTokens === undefined || tokenizer.count(whole) <= maxTokens) return whole;
  // Respect max_tokens like a real model would: stop once the budget is used.
  let out = '';
  for (const w of words) {
    const next = out ? `${out} ${w}` : w;
    if (tokenizer.count(next) > maxTokens) break;
    out = next;
  }
  return out;
}

/** A text route: the parsed JSON body in, the simulated answer out. */
type TextRoute = (
  c: UpstreamCall,
  body: Record<string, unknown>,
  opts: SimulatorOptions,
  tokenizer: Tokenizer,
  cache: PromptCache,
) => UpstreamResponse | Promise<UpstreamResponse>;

/** Tokens of chat messages as the simulator counts them: 4 per message plus its content, 3 per prompt. */
function messageTokens(messages: unknown[], tokenizer: Tokenizer): number {
  return messages.reduce((n: number, m: unknown) => n + 4 + tokenizer.count(contentText((m as { content?: unknown })?.content)), 3);
}

function chat(c: UpstreamCall, body: Record<string, unknown>, opts: SimulatorOptions, tokenizer: Tokenizer, cache: PromptCache): UpstreamResponse {
  const model = String(body.model);
  const prompt = lastUserText(body.messages);
  const maxTokens =
    typeof body.max_tokens === 'number'
      ? body.max_tokens
      : typeof body.max_completion_tokens === 'number'
        ? body.max_completion_tokens
        : undefined;
  const answer = simulatedAnswer(prompt, maxTokens, tokenizer);
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const promptTokens = messageTokens(messages, tokenizer);
  const completionTokens = tokenizer.count(answer);
  // Every message before the last is the prefix a provider's prompt cache may hold.
  const prefix = messages.slice(0, -1);
  const cached = cache.use(`${model}\n${JSON.stringify(prefix)}`, messageTokens(prefix, tokenizer), promptTokens);
  const usage = {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cached.cached, cache_write_tokens: cached.written },
  };
  const id = `chatcmpl-sim-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const finish = maxTokens !== undefined && answer.split(' ').length < simulatedAnswer(prompt, undefined, tokenizer).split(' ').length ? 'length' : 'stop';
  if (body.stream !== true) {
    return jsonResponse(200, {
      id,
      object: 'chat.completion',
      created,
      model,
      choices: [{ index: 0, message: { role: 'assistant', content: answer, refusal: null, annotations: [] }, logprobs: null, finish_reason: finish }],
      usage,
    });
  }
  const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
  const words = answer.split(' ');
  const chunk = (delta: Record<string, unknown>, finishReason: string | null, extra: Record<string, unknown> = {}) =>
    encoder.encode(
      `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }], ...extra })}\n\n`,
    );
  const signal = c.signal;
  const delay = opts.chunkDelayMs;
  async function* events() {
    yield chunk({ role: 'assistant', content: '' }, null);
    for (let i = 0; i < words.length; i++) {
      if (delay > 0) await sleep(delay, signal);
      yield chunk({ content: (i === 0 ? '' : ' ') + words[i] }, null);
    }
    yield chunk({}, finish);
    if (includeUsage) {
      yield encoder.encode(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [], usage })}\n\n`,
      );
    }
    yield encoder.encode('data: [DONE]\n\n');
  }
  return streamResponse(200, events(), { 'content-type': 'text/event-stream' });
}

/**
 * Deterministic unit vectors from the text's bytes: same input, same embedding. Each number
 * is a float32, as a real model's are, so the float and base64 answers carry the same values.
 */
function embed(input: string | number[], dimensions: number): number[] {
  const seed = typeof input === 'string' ? Buffer.from(input, 'utf8') : Buffer.from(input.map((n) => n & 0xff));
  const v = Array.from({ length: dimensions }, (_, i) => ((seed[i % Math.max(1, seed.length)] ?? 0) + i * 31) % 97 - 48);
  const norm = Math.sqrt(v.reduce((n, x) => n + x * x, 0)) || 1;
  return v.map((x) => Math.fround(x / norm));
}

/**
 * `encoding_format: "base64"` (what the openai SDK asks for unless told otherwise) is the
 * vector's little-endian float32 bytes in base64, as OpenAI answers; anything else is floats.
 */
function encodeEmbedding(vector: number[], format: unknown): number[] | string {
  if (format !== 'base64') return vector;
  const bytes = Buffer.alloc(vector.length * 4);
  for (const [i, x] of vector.entries()) bytes.writeFloatLE(x, i * 4);
  return bytes.toString('base64');
}

function embeddings(_c: UpstreamCall, body: Record<string, unknown>, _opts: SimulatorOptions, tokenizer: Tokenizer): UpstreamResponse {
  const raw = body.input;
  const items: Array<string | number[]> =
    typeof raw === 'string' ? [raw] : Array.isArray(raw) && typeof raw[0] === 'number' ? [raw as number[]] : ((raw ?? []) as Array<string | number[]>);
  const dimensions = typeof body.dimensions === 'number' ? Math.min(body.dimensions, 3072) : 256;
  const tokens = items.reduce((n: number, it) => n + (typeof it === 'string' ? tokenizer.count(it) : it.length), 0);
  return jsonResponse(200, {
    object: 'list',
    data: items.map((it, index) => ({ object: 'embedding', index, embedding: encodeEmbedding(embed(it, dimensions), body.encoding_format) })),
    model: String(body.model),
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  });
}

function maxTokensOf(value: unknown): number | undefined {
  return typeof value === 'number' ? value : undefined;
}

function completions(c: UpstreamCall, body: Record<string, unknown>, opts: SimulatorOptions, tokenizer: Tokenizer): UpstreamResponse {
  const prompt = typeof body.prompt === 'string' ? body.prompt : Array.isArray(body.prompt) && typeof body.prompt[0] === 'string' ? body.prompt[0] : '';
  const answer = simulatedAnswer(prompt, maxTokensOf(body.max_tokens), tokenizer);
  const promptTokens = tokenizer.count(prompt);
  const usage = { prompt_tokens: promptTokens, completion_tokens: tokenizer.count(answer), total_tokens: promptTokens + tokenizer.count(answer) };
  const id = `cmpl-sim-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const model = String(body.model);
  if (body.stream !== true) {
    return jsonResponse(200, {
      id, object: 'text_completion', created, model,
      choices: [{ index: 0, text: answer, logprobs: null, finish_reason: 'stop' }],
      usage,
    });
  }
  const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    encoder.encode(`data: ${JSON.stringify({ id, object: 'text_completion', created, model, choices, ...extra })}\n\n`);
  const words = answer.split(' ');
  async function* events() {
    for (let i = 0; i < words.length; i++) {
      if (opts.chunkDelayMs > 0) await sleep(opts.chunkDelayMs, c.signal);
      yield chunk([{ index: 0, text: (i === 0 ? '' : ' ') + words[i], logprobs: null, finish_reason: null }]);
    }
    yield chunk([{ index: 0, text: '', logprobs: null, finish_reason: 'stop' }]);
    if (includeUsage) yield chunk([], { usage });
    yield encoder.encode('data: [DONE]\n\n');
  }
  return streamResponse(200, events(), { 'content-type': 'text/event-stream' });
}

function responses(c: UpstreamCall, body: Record<string, unknown>, opts: SimulatorOptions, tokenizer: Tokenizer, cache: PromptCache): UpstreamResponse {
  const input = body.input;
  const prompt = typeof input === 'string' ? input : lastUserText(input);
  const answer = simulatedAnswer(prompt, maxTokensOf(body.max_output_tokens), tokenizer);
  const instructions = typeof body.instructions === 'string' ? body.instructions : '';
  const inputTokens = tokenizer.count(instructions) + (typeof input === 'string' ? tokenizer.count(input) : tokenizer.count(JSON.stringify(input ?? '')));
  const outputTokens = tokenizer.count(answer);
  // The instructions and every input item before the last are the prefix a provider's cache may hold.
  const prefix = `${instructions}\n${Array.isArray(input) ? JSON.stringify(input.slice(0, -1)) : ''}`;
  const cached = cache.use(`${String(body.model)}\n${prefix}`, tokenizer.count(prefix), inputTokens);
  const id = `resp_sim${randomUUID().replaceAll('-', '')}`;
  const msgId = `msg_sim${randomUUID().replaceAll('-', '')}`;
  const created_at = Math.floor(Date.now() / 1000);
  const base = {
    id, object: 'response', created_at, model: String(body.model), instructions: instructions || null,
    error: null, incomplete_details: null, metadata: {}, parallel_tool_calls: true, temperature: 1, top_p: 1,
    tool_choice: 'auto', tools: [], max_output_tokens: maxTokensOf(body.max_output_tokens) ?? null,
  };
  const message = (text: string, status: string) => ({
    id: msgId, type: 'message', role: 'assistant', status,
    content: [{ type: 'output_text', text, annotations: [], logprobs: [] }],
  });
  const usage = {
    input_tokens: inputTokens,
    input_tokens_details: { cached_tokens: cached.cached, cache_write_tokens: cached.written },
    output_tokens: outputTokens, output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: inputTokens + outputTokens,
  };
  const done = { ...base, status: 'completed', output: [message(answer, 'completed')], usage };
  if (body.stream !== true) return jsonResponse(200, done);
  let seq = 0;
  const ev = (type: string, data: Record<string, unknown>) =>
    encoder.encode(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`);
  const words = answer.split(' ');
  async function* events() {
    // No usage until the response is done (OpenAI's schema has no null usage).
    const pending = { ...base, status: 'in_progress', output: [] };
    yield ev('response.created', { response: pending });
    yield ev('response.in_progress', { response: pending });
    yield ev('response.output_item.added', { output_index: 0, item: { ...message('', 'in_progress'), content: [] } });
    yield ev('response.content_part.added', { item_id: msgId, output_index: 0, content_index: 0, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } });
    for (let i = 0; i < words.length; i++) {
      if (opts.chunkDelayMs > 0) await sleep(opts.chunkDelayMs, c.signal);
      yield ev('response.output_text.delta', { item_id: msgId, output_index: 0, content_index: 0, delta: (i === 0 ? '' : ' ') + words[i], logprobs: [] });
    }
    yield ev('response.output_text.done', { item_id: msgId, output_index: 0, content_index: 0, text: answer, logprobs: [] });
    yield ev('response.content_part.done', { item_id: msgId, output_index: 0, content_index: 0, part: { type: 'output_text', text: answer, annotations: [], logprobs: [] } });
    yield ev('response.output_item.done', { output_index: 0, item: message(answer, 'completed') });
    yield ev('response.completed', { response: done });
  }
  return streamResponse(200, events(), { 'content-type': 'text/event-stream' });
}

/**
 * OpenAI's moderations: one result per input text, flagged when it holds `[flag]` (what a
 * moderation guardrail over the simulator blocks).
 */
async function moderations(_c: UpstreamCall, body: Record<string, unknown>): Promise<UpstreamResponse> {
  const input = Array.isArray(body.input) ? body.input : [body.input];
  const results = input.map((t) => {
    const flagged = typeof t === 'string' && t.includes('[flag]');
    return { flagged, categories: { harassment: flagged }, category_scores: { harassment: flagged ? 0.99 : 0.01 } };
  });
  return jsonResponse(200, { id: `modr-${randomUUID()}`, model: typeof body.model === 'string' ? body.model : 'omni-moderation-latest', results });
}

async function textCall(c: UpstreamCall, opts: SimulatorOptions, tokenizer: Tokenizer, route: TextRoute, cache: PromptCache): Promise<UpstreamResponse> {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(typeof c.body === 'string' ? c.body : new TextDecoder().decode(c.body ?? new Uint8Array()));
  } catch {
    return jsonResponse(400, { error: { message: 'invalid JSON', type: 'invalid_request_error', code: null, param: null } });
  }
  return route(c, body, opts, tokenizer, cache);
}

export function createSimulator(name: string, opts: SimulatorOptions, tokenizer: Tokenizer): Upstream {
  const media = createMediaSimulator(opts, tokenizer);
  const cache = new PromptCache();
  const gemini = createGeminiSimulator(tokenizer, cache);
  return {
    name,
    simulated: true,
    async call(c) {
      if (c.method === 'POST' && c.path === '/chat/completions') return textCall(c, opts, tokenizer, chat, cache);
      if (c.method === 'POST' && c.path === '/embeddings') return textCall(c, opts, tokenizer, embeddings, cache);
      if (c.method === 'POST' && c.path === '/completions') return textCall(c, opts, tokenizer, completions, cache);
      if (c.method === 'POST' && c.path === '/responses') return textCall(c, opts, tokenizer, responses, cache);
      if (c.method === 'POST' && c.path === '/moderations') return textCall(c, opts, tokenizer, moderations, cache);
      // Anthropic's Messages API, for `kind: "anthropic"` (any other kind is sent chat instead).
      if (c.method === 'POST' && c.path === '/messages') {
        return textCall(c, opts, tokenizer, (call, body) => simulateMessages(call, body, (cc, b) => chat(cc, b, opts, tokenizer, cache)), cache);
      }
      const google = gemini.handle(c, opts);
      if (google) return google;
      const handled = await media.handle(c);
      if (handled) return handled;
      return jsonResponse(404, { error: { message: `simulator: no route ${c.method} ${c.path}`, type: 'invalid_request_error', code: null, param: null } });
    },
    async close() {
      media.close();
    },
  };
}
