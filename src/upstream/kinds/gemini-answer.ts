/**
 * Chat completions carried by a Gemini upstream, the answer half: a `GenerateContentResponse`
 * becomes a chat completion, and a `streamGenerateContent?alt=sse` stream becomes chat chunks
 * ending with a usage chunk and `data: [DONE]`, so the gateway reads and bills it as any chat
 * answer. Usage keeps every count Gemini bills: the prompt with its cached part, and the
 * output with the model's thinking.
 */
import { errors } from '../../errors.js';
import { GeminiAccount, geminiUsage } from '../answers/gemini.js';
import { EventTranslator } from './event-translator.js';
import { idBase, toolCallId } from './gemini-ids.js';
import { eventData, isObject } from './shared.js';

/** Gemini's reasons a candidate stopped that are a filter's doing. */
const FILTERED = new Set(['SAFETY', 'RECITATION', 'BLOCKLIST', 'PROHIBITED_CONTENT', 'SPII', 'IMAGE_SAFETY', 'IMAGE_PROHIBITED_CONTENT', 'IMAGE_RECITATION']);

/** A chat `finish_reason` for Gemini's `finishReason`. */
export function finishReason(reason: unknown, calledTools: boolean): string {
  if (reason === 'MAX_TOKENS') return 'length';
  if (typeof reason === 'string' && FILTERED.has(reason)) return 'content_filter';
  return calledTools ? 'tool_calls' : 'stop';
}

/**
 * Chat usage for `usageMetadata`, as the answer reader reads it (one reading: what the client
 * is told is what is billed); `null` when it reports no valid prompt count or a malformed
 * output count.
 */
export function chatUsage(meta: unknown): Record<string, unknown> | null {
  const usage = geminiUsage(meta);
  if (!usage) return null;
  return {
    prompt_tokens: usage.prompt,
    completion_tokens: usage.completion,
    total_tokens: usage.prompt + usage.completion,
    prompt_tokens_details: { cached_tokens: usage.cachedPrompt ?? 0 },
    completion_tokens_details: { reasoning_tokens: usage.reasoning ?? 0 },
  };
}

/** What one candidate's parts say: text (thoughts left out: Gemini sends them only when asked) and function calls. */
function readParts(parts: unknown, base: string, candidate: number, calls: number) {
  let text = '';
  const toolCalls: Record<string, unknown>[] = [];
  for (const part of Array.isArray(parts) ? parts : []) {
    if (!isObject(part) || part.thought === true) continue;
    if (typeof part.text === 'string') text += part.text;
    const call = part.functionCall;
    if (isObject(call) && typeof call.name === 'string') {
      toolCalls.push({
        id: toolCallId(base, candidate, calls + toolCalls.length, part.thoughtSignature),
        type: 'function',
        function: { name: call.name, arguments: JSON.stringify(isObject(call.args) ? call.args : {}) },
      });
    }
  }
  return { text, toolCalls };
}

const candidatesOf = (body: Record<string, unknown>): Record<string, unknown>[] =>
  Array.isArray(body.candidates) ? body.candidates.filter(isObject) : [];
const indexOf = (c: Record<string, unknown>, i: number) => (typeof c.index === 'number' ? c.index : i);

/** The chat completion for a `generateContent` answer. Throws when it is not one. */
export function geminiAnswer(body: Record<string, unknown>): Record<string, unknown> {
  if (!Array.isArray(body.candidates) && !isObject(body.promptFeedback)) throw new Error('not a generateContent answer');
  const base = idBase(body.responseId);
  const choices = candidatesOf(body).map((c, i) => {
    const index = indexOf(c, i);
    const { text, toolCalls } = readParts(isObject(c.content) ? c.content.parts : undefined, base, index, 0);
    const message: Record<string, unknown> = { role: 'assistant', content: text || (toolCalls.length ? null : ''), refusal: null };
    if (toolCalls.length) message.tool_calls = toolCalls;
    return { index, message, logprobs: null, finish_reason: finishReason(c.finishReason, toolCalls.length > 0) };
  });
  // A prompt Gemini blocked has no candidate at all: one empty, filtered choice says so.
  if (choices.length === 0) {
    choices.push({ index: 0, message: { role: 'assistant', content: null, refusal: null }, logprobs: null, finish_reason: 'content_filter' });
  }
  const usage = chatUsage(body.usageMetadata);
  return {
    id: `chatcmpl-${base}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: typeof body.modelVersion === 'string' ? body.modelVersion : 'gemini',
    choices,
    ...(usage ? { usage } : {}),
  };
}

/**
 * A Gemini stream as chat chunks. Each event is a partial `GenerateContentResponse`: its
 * text parts are deltas, its function calls come whole, and its `usageMetadata` is the
 * running total (the last one is final). The usage chunk and `[DONE]` go out when the
 * upstream's body ends, and only if every candidate finished: a cut stream must not look
 * like a finished one.
 */
export class GeminiChatStream extends EventTranslator {
  private base: string | null = null;
  private model = 'gemini';
  private readonly created = Math.floor(Date.now() / 1000);
  private usage: Record<string, unknown> | null = null;
  /** Function calls so far, per candidate (their chunk index and their ids follow it). */
  private readonly calls = new Map<number, number>();
  private readonly finished = new Set<number>();
  /** The answer as Gemini says it: what the stream is billed by. */
  readonly account = new GeminiAccount();

  /** The chat answer's last chunks: its usage and [DONE], only when every candidate finished (else it was cut). */
  protected override tail(): string {
    const complete = this.finished.size > 0 && [...this.calls.keys()].every((i) => this.finished.has(i));
    if (!complete) return '';
    return `${this.usage ? this.frame([], { usage: this.usage }) : ''}data: [DONE]\n\n`;
  }

  private frame(choices: unknown[], extra: Record<string, unknown> = {}): string {
    return `data: ${JSON.stringify({ id: `chatcmpl-${this.base}`, object: 'chat.completion.chunk', created: this.created, model: this.model, choices, ...extra })}\n\n`;
  }

  protected event(data: string): string {
    const event = eventData(data);
    if (event.error) throw errors.upstreamFailedMidStream(event.error);
    this.account.read(event);
    this.base ??= idBase(event.responseId);
    if (typeof event.modelVersion === 'string') this.model = event.modelVersion;
    this.usage = chatUsage(event.usageMetadata) ?? this.usage;
    const choices: unknown[] = [];
    candidatesOf(event).forEach((c, i) => {
      const index = indexOf(c, i);
      const before = this.calls.get(index);
      const { text, toolCalls } = readParts(isObject(c.content) ? c.content.parts : undefined, this.base!, index, before ?? 0);
      const delta: Record<string, unknown> = before === undefined ? { role: 'assistant', content: text } : text ? { content: text } : {};
      if (toolCalls.length) delta.tool_calls = toolCalls.map((call, k) => ({ index: (before ?? 0) + k, ...call }));
      const calls = (before ?? 0) + toolCalls.length;
      this.calls.set(index, calls);
      const finish = c.finishReason === undefined || c.finishReason === null ? null : finishReason(c.finishReason, calls > 0);
      if (finish) this.finished.add(index);
      if (finish || Object.keys(delta).length) choices.push({ index, delta, logprobs: null, finish_reason: finish });
    });
    if (choices.length === 0 && isObject(event.promptFeedback) && event.promptFeedback.blockReason) {
      this.calls.set(0, this.calls.get(0) ?? 0);
      this.finished.add(0);
      choices.push({ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: 'content_filter' });
    }
    return choices.length ? this.frame(choices) : '';
  }
}
