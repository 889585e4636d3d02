/**
 * A chat completions stream read as a Messages stream: `message_start` at the first chunk,
 * one content block per run of text, reasoning or a tool call (its arguments as
 * `input_json_delta`), and at the end `message_delta` (the stop reason, and the usage of
 * chat's usage chunk, which comes after the finish) then `message_stop`.
 */
import { randomUUID } from 'node:crypto';
import { errors } from '../../../errors.js';
import { EventTranslator } from '../event-translator.js';
import { ChatAccount } from '../../answers/chat.js';
import type { StreamTranslator } from '../types.js';
import { eventOf, isObject, type Json, messagesEvent, messagesUsageOf, stopReason, answerText } from './shared.js';

type Open = { kind: 'text' | 'thinking' | 'tool'; index: number } | null;

export class ChatToMessagesEvents extends EventTranslator implements StreamTranslator {
  private started = false;
  private ended = false;
  private open: Open = null;
  private blocks = 0;
  /** Chat's tool call index -> the content block carrying it. */
  private readonly tools = new Map<number, number>();
  private finish: unknown = null;
  private usage: unknown = null;
  /** The answer came as a refusal (chat's `refusal` field). */
  private refused = false;
  /** The answer as the chat upstream says it: what the stream is billed by. */
  readonly account = new ChatAccount();

  protected event(data: string): string {
    return data === '[DONE]' ? this.close() : this.chunk(eventOf(data));
  }

  protected override stopped(): boolean {
    return this.ended;
  }

  /** A body that ended after the finish but without [DONE] still closes the Message. */
  protected override tail(): string {
    return this.close();
  }

  /** The answer's last events, once its finish came (a stream that never finished gets none: it was cut). */
  private close(): string {
    if (this.ended || this.finish === null) return '';
    this.ended = true;
    const usage = messagesUsageOf(this.usage);
    return messagesEvent({ type: 'message_delta', delta: { stop_reason: this.refused ? 'refusal' : stopReason(this.finish), stop_sequence: null }, usage }) + messagesEvent({ type: 'message_stop' });
  }

  private chunk(c: Json): string {
    if (c.error) throw errors.upstreamFailedMidStream(c.error);
    this.account.read(c);
    let out = '';
    if (!this.started) {
      this.started = true;
      const id = typeof c.id === 'string' ? `msg_${c.id.replace(/^chatcmpl-/, '')}` : `msg_${randomUUID().replaceAll('-', '')}`;
      const message = { id, type: 'message', role: 'assistant', model: c.model, content: [], stop_reason: null, stop_sequence: null, usage: messagesUsageOf(null) };
      out += messagesEvent({ type: 'message_start', message });
    }
    if (isObject(c.usage)) this.usage = c.usage;
    const choice = Array.isArray(c.choices) ? c.choices[0] : undefined;
    if (isObject(choice)) {
      const delta = isObject(choice.delta) ? choice.delta : {};
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoning === 'string' && reasoning) out += this.delta('thinking', { type: 'thinking_delta', thinking: reasoning });
      const content = answerText(delta.content);
      if (content) out += this.delta('text', { type: 'text_delta', text: content });
      // A chat refusal streams in its own field; Messages says it as text, stopped as `refusal`.
      if (typeof delta.refusal === 'string' && delta.refusal) {
        this.refused = true;
        out += this.delta('text', { type: 'text_delta', text: delta.refusal });
      }
      if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls) if (isObject(call)) out += this.toolCall(call);
      if (typeof choice.finish_reason === 'string') {
        out += this.stopBlock();
        this.finish = choice.finish_reason;
      }
    }
    // The Message closes at chat's end ([DONE], or the body's end after the finish), never at
    // a usage report: one sent with the finish, or before it, may be followed by a later one
    // (the final count), which native chat bills and so must the translation.
    return out;
  }

  private stopBlock(): string {
    if (!this.open) return '';
    const index = this.open.index;
    this.open = null;
    return messagesEvent({ type: 'content_block_stop', index });
  }

  private startBlock(kind: 'text' | 'thinking' | 'tool', block: Json): string {
    const out = this.stopBlock();
    this.open = { kind, index: this.blocks++ };
    return out + messagesEvent({ type: 'content_block_start', index: this.open.index, content_block: block });
  }

  private delta(kind: 'text' | 'thinking', delta: Json): string {
    let out = '';
    if (this.open?.kind !== kind) out += this.startBlock(kind, kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' });
    return out + messagesEvent({ type: 'content_block_delta', index: this.open!.index, delta });
  }

  private toolCall(call: Json): string {
    const at = typeof call.index === 'number' ? call.index : 0;
    const fn = isObject(call.function) ? call.function : {};
    let out = '';
    let index = this.tools.get(at);
    if (index === undefined) {
      out += this.startBlock('tool', { type: 'tool_use', id: call.id ?? `toolu_${randomUUID().replaceAll('-', '')}`, name: fn.name ?? '', input: {} });
      index = this.open!.index;
      this.tools.set(at, index);
    }
    // Some compatible servers send a call's arguments as an object: the same JSON, as text.
    const args = typeof fn.arguments === 'string' ? fn.arguments : isObject(fn.arguments) ? JSON.stringify(fn.arguments) : '';
    if (args) out += messagesEvent({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: args } });
    return out;
  }
}
