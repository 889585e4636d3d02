/**
 * A Messages stream read as a chat completions stream: text and thinking deltas as content
 * and `reasoning_content` deltas, `tool_use` blocks as tool calls (their `input_json_delta`s
 * as arguments), `message_delta`'s stop reason as the finish, and at `message_stop` the usage
 * chunk (the whole input in `prompt_tokens`, its cache reads and writes in the details) and
 * `[DONE]`.
 */
import { errors } from '../../../errors.js';
import { DONE_FRAME, frameEvent } from '../../stream/sse.js';
import { EventTranslator } from '../event-translator.js';
import { MessagesAccount } from '../../answers/messages.js';
import type { StreamTranslator } from '../types.js';
import { chatFinish, chatUsageOf, eventOf, isObject, type Json } from './shared.js';

export class MessagesToChatEvents extends EventTranslator implements StreamTranslator {
  private id = '';
  private model: unknown = '';
  private readonly created = Math.floor(Date.now() / 1000);
  /** The Message's usage so far: `message_start`'s, updated by each `message_delta`. */
  private usage: Json = {};
  /** Content block index -> the chat tool call index it carries. */
  private readonly tools = new Map<number, number>();
  private ended = false;
  /** The answer as Anthropic says it: what the stream is billed by. */
  readonly account = new MessagesAccount();

  protected event(data: string): string {
    return this.translate(eventOf(data));
  }

  protected override stopped(): boolean {
    return this.ended;
  }

  private chunk(delta: Json, finish: string | null = null): string {
    return frameEvent(
      JSON.stringify({ id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }),
    );
  }

  private translate(e: Json): string {
    this.account.read(e);
    switch (e.type) {
      case 'message_start': {
        const message = isObject(e.message) ? e.message : {};
        this.id = `chatcmpl-${String(message.id ?? '')}`;
        this.model = message.model;
        if (isObject(message.usage)) this.usage = { ...message.usage };
        return this.chunk({ role: 'assistant', content: '' });
      }
      case 'content_block_start':
        return this.blockStart(e);
      case 'content_block_delta':
        return this.blockDelta(e);
      case 'message_delta': {
        if (isObject(e.usage)) for (const [k, v] of Object.entries(e.usage)) if (v !== null && v !== undefined) this.usage[k] = v;
        const delta = isObject(e.delta) ? e.delta : {};
        return delta.stop_reason ? this.chunk({}, chatFinish(delta.stop_reason)) : '';
      }
      case 'message_stop': {
        this.ended = true;
        const usage = { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.model, choices: [], usage: chatUsageOf(this.usage) };
        return frameEvent(JSON.stringify(usage)) + DONE_FRAME;
      }
      case 'error':
        throw errors.upstreamFailedMidStream(e.error);
      default:
        // ping, content_block_stop, and events a later API version adds: nothing for chat.
        return '';
    }
  }

  private blockStart(e: Json): string {
    const block = isObject(e.content_block) ? e.content_block : {};
    if (block.type !== 'tool_use' || typeof e.index !== 'number') return '';
    const at = this.tools.size;
    this.tools.set(e.index, at);
    return this.chunk({ tool_calls: [{ index: at, id: block.id, type: 'function', function: { name: block.name, arguments: '' } }] });
  }

  private blockDelta(e: Json): string {
    const delta = isObject(e.delta) ? e.delta : {};
    if (delta.type === 'text_delta' && typeof delta.text === 'string') return this.chunk({ content: delta.text });
    if (delta.type === 'thinking_delta' && typeof delta.thinking === 'string') return this.chunk({ reasoning_content: delta.thinking });
    if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string' && typeof e.index === 'number') {
      const at = this.tools.get(e.index);
      if (at === undefined) throw errors.malformedEvent();
      return delta.partial_json ? this.chunk({ tool_calls: [{ index: at, function: { arguments: delta.partial_json } }] }) : '';
    }
    return '';
  }
}
