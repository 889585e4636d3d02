/**
 * Chat completions, legacy completions and embeddings answers as cache entries (see format.ts):
 * a chat or completions stream is collected choice by choice into the plain answer it stands
 * for, and a plain answer is replayed as the chunks a stream of it would have sent.
 */
import type { Usage } from '../billing/usage.js';
import { type CacheEntry, type CacheFormat, type Collector, isObject, openAIUsage, sse } from './format.js';

/** The client asked for the usage chunk of a stream. */
const wantsUsage = (request: Record<string, unknown>) => isObject(request.stream_options) && request.stream_options.include_usage === true;

/** Appends `value` to `into[field]` when both are strings (or the field is new). */
function append(into: Record<string, unknown>, field: string, value: unknown): void {
  if (typeof value !== 'string') return;
  into[field] = typeof into[field] === 'string' ? into[field] + value : value;
}

/**
 * A chunk's `logprobs` folded into its collected choice's: each list (chat's `content` and
 * `refusal`, completions' `tokens`, `token_logprobs`, `top_logprobs`, `text_offset`) extended by
 * the chunk's, in order, so an answer collected off a stream keeps what its plain form carries.
 */
function mergeLogprobs(into: Record<string, unknown>, logprobs: unknown): void {
  if (!isObject(logprobs)) {
    into.logprobs ??= null;
    return;
  }
  const merged = (isObject(into.logprobs) ? into.logprobs : (into.logprobs = {})) as Record<string, unknown>;
  for (const [k, v] of Object.entries(logprobs)) {
    // The collected list is the collector's own copy: extended in place (a long answer has a chunk per token).
    if (Array.isArray(v)) {
      if (Array.isArray(merged[k])) for (const x of v) (merged[k] as unknown[]).push(x);
      else merged[k] = [...v];
    } else if (merged[k] === undefined || merged[k] === null) merged[k] = v;
  }
}

/** The fields every chunk of a replayed stream carries: the answer's id, time, model and fingerprint. */
function chunkBase(body: Record<string, unknown>, object: string): Record<string, unknown> {
  const base: Record<string, unknown> = { id: body.id, object, created: body.created, model: body.model };
  if (body.system_fingerprint !== undefined) base.system_fingerprint = body.system_fingerprint;
  return base;
}

/** Collects an OpenAI-style stream: `merge` folds one choice's chunk into its collected choice. */
class ChoicesCollector implements Collector {
  private head: Record<string, unknown> | null = null;
  private readonly choices = new Map<number, Record<string, unknown>>();
  private usage: unknown = null;

  constructor(
    private readonly object: string,
    private readonly merge: (into: Record<string, unknown>, chunk: Record<string, unknown>) => void,
    /** Puts a whole collected choice in its plain form. */
    private readonly settle: (choice: Record<string, unknown>) => void = () => {},
  ) {}

  event(data: string): void {
    if (data === '[DONE]') return;
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      return;
    }
    if (!isObject(chunk)) return;
    this.head ??= chunk;
    if (isObject(chunk.usage)) this.usage = chunk.usage;
    for (const c of Array.isArray(chunk.choices) ? chunk.choices : []) {
      if (!isObject(c)) continue;
      const index = typeof c.index === 'number' ? c.index : 0;
      let into = this.choices.get(index);
      if (!into) this.choices.set(index, (into = { index }));
      this.merge(into, c);
      if (typeof c.finish_reason === 'string') into.finish_reason = c.finish_reason;
    }
  }

  body(usage: Usage): Record<string, unknown> | null {
    const head = this.head;
    if (!head || this.choices.size === 0) return null;
    const choices = [...this.choices.values()].sort((a, b) => (a.index as number) - (b.index as number));
    // Only a whole answer is kept: every choice finished.
    if (choices.some((c) => typeof c.finish_reason !== 'string')) return null;
    for (const c of choices) this.settle(c);
    const body: Record<string, unknown> = { ...chunkBase(head, this.object), choices };
    body.usage = this.usage ?? openAIUsage(usage);
    return body;
  }
}

/** A chat chunk's delta folded into its choice's message: text fields appended, tool calls by their index. */
function mergeChat(into: Record<string, unknown>, choice: Record<string, unknown>): void {
  mergeLogprobs(into, choice.logprobs);
  const message = (into.message ??= { role: 'assistant', content: null }) as Record<string, unknown>;
  const delta = isObject(choice.delta) ? choice.delta : {};
  for (const [k, v] of Object.entries(delta)) {
    if (k === 'role') {
      if (typeof v === 'string') message.role = v;
    } else if (k === 'tool_calls' && Array.isArray(v)) {
      const calls = (message.tool_calls ??= []) as Record<string, unknown>[];
      for (const d of v) {
        if (!isObject(d)) continue;
        const at = typeof d.index === 'number' ? d.index : calls.length;
        const call = (calls[at] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (typeof d.id === 'string') call.id = d.id;
        if (typeof d.type === 'string') call.type = d.type;
        const fn = call.function as Record<string, unknown>;
        if (isObject(d.function)) {
          append(fn, 'name', d.function.name);
          append(fn, 'arguments', d.function.arguments);
        }
      }
    } else if (k === 'function_call' && isObject(v)) {
      const fn = (message.function_call ??= { name: '', arguments: '' }) as Record<string, unknown>;
      append(fn, 'name', v.name);
      append(fn, 'arguments', v.arguments);
    } else if (typeof v === 'string') {
      append(message, k, v);
    } else if (v !== null && v !== undefined && message[k] === undefined) {
      message[k] = v;
    }
  }
}

/**
 * A collected message as a plain answer carries it: a message of tool calls whose stream opened
 * with an empty content delta has content null, as the plain answer's has.
 */
function plainMessage(choice: Record<string, unknown>): void {
  const message = choice.message as Record<string, unknown> | undefined;
  if (message && message.content === '' && Array.isArray(message.tool_calls) && message.tool_calls.length > 0) message.content = null;
}

/** A chat answer's message as the one delta of its stream (tool calls given their index). */
function chatDelta(message: Record<string, unknown>): Record<string, unknown> {
  const delta: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(message)) {
    if (v === null || v === undefined) continue;
    delta[k] = k === 'tool_calls' && Array.isArray(v) ? v.map((c, index) => (isObject(c) ? { index, ...c } : c)) : v;
  }
  delta.role ??= 'assistant';
  return delta;
}

/** The stream of a plain OpenAI-style answer: each choice's output, its finish, the usage chunk when asked, `[DONE]`. */
function replay(entry: CacheEntry, request: Record<string, unknown>, object: string, output: (c: Record<string, unknown>) => Record<string, unknown>, empty: Record<string, unknown>): string {
  const body = entry.body;
  const base = chunkBase(body, object);
  let out = '';
  for (const c of Array.isArray(body.choices) ? body.choices : []) {
    if (!isObject(c)) continue;
    out += sse({ ...base, choices: [{ index: c.index ?? 0, ...output(c), logprobs: c.logprobs ?? null, finish_reason: null }] });
    out += sse({ ...base, choices: [{ index: c.index ?? 0, ...empty, logprobs: null, finish_reason: c.finish_reason ?? 'stop' }] });
  }
  if (wantsUsage(request)) out += sse({ ...base, choices: [], usage: isObject(body.usage) ? body.usage : openAIUsage(entry.usage) });
  return `${out}data: [DONE]\n\n`;
}

export const chatFormat: CacheFormat = {
  stream: (entry, request) =>
    replay(entry, request, 'chat.completion.chunk', (c) => ({ delta: chatDelta(isObject(c.message) ? c.message : {}) }), { delta: {} }),
  collect: () => new ChoicesCollector('chat.completion', mergeChat, plainMessage),
};

export const completionsFormat: CacheFormat = {
  stream: (entry, request) => replay(entry, request, 'text_completion', (c) => ({ text: typeof c.text === 'string' ? c.text : '' }), { text: '' }),
  collect: () =>
    new ChoicesCollector('text_completion', (into, c) => {
      mergeLogprobs(into, c.logprobs);
      into.text = (typeof into.text === 'string' ? into.text : '') + (typeof c.text === 'string' ? c.text : '');
    }),
};

/** Embeddings are never streamed: an entry is only ever replayed plain. */
export const embeddingsFormat: CacheFormat = {
  stream: () => {
    throw new Error('embeddings are never streamed');
  },
  collect: () => ({ event() {}, body: () => null }),
};
