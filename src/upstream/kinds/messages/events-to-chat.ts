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
  /** The thinking block being streamed: its text and signature, sent whole at its end. */
  private thinking: { index: unknown; text: string; signature: string } | null = null;
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
      case 'content_block_stop':
        return this.blockStop(e);
      default:
        // ping, and events a later API version adds: nothing for chat.
        return '';
    }
  }

  /**
   * A block opens. Anthropic opens every block empty, but a compatible upstream may put the
   * first text, thinking or a tool's whole input in the start event: it is relayed as the
   * first delta would be (the answer's account counts it, so the client must get it).
   */
  private blockStart(e: Json): string {
    const block = isObject(e.content_block) ? e.content_block : {};
    if (block.type === 'thinking') {
      const text = typeof block.thinking === 'string' ? block.thinking : '';
      this.thinking = { index: e.index, text, signature: typeof block.signature === 'string' ? block.signature : '' };
      return text ? this.chunk({ reasoning_content: text }) : '';
    }
    if (block.type === 'text') return typeof block.text === 'string' && block.text ? this.chunk({ content: block.text }) : '';
    // A redacted block has no text to show: it goes out whole, for the client to send back.
    if (block.type === 'redacted_thinking' && typeof block.data === 'string') return this.chunk({ thinking_blocks: [{ type: 'redacted_thinking', data: block.data }] });
    if (block.type !== 'tool_use' || typeof e.index !== 'number') return '';
    const at = this.tools.size;
    this.tools.set(e.index, at);
    // An input given whole at the start (not empty: Anthropic's `{}` is followed by its deltas).
    const whole = isObject(block.input) && Object.keys(block.input).length > 0 ? JSON.stringify(block.input) : '';
    return this.chunk({ tool_calls: [{ index: at, id: block.id, type: 'function', function: { name: block.name, arguments: whole } }] });
  }

  private blockDelta(e: Json): string {
    const delta = isObject(e.delta) ? e.delta : {};
    if (delta.type === 'text_delta' && typeof delta.text === 'string') return this.chunk({ content: delta.text });
    const open = this.thinking !== null && this.thinking.index === e.index ? this.thinking : null;
    if (delta.type === 'thinking_delta' && typeof delta.thinking === 'string') {
      if (open) open.text += delta.thinking;
      return this.chunk({ reasoning_content: delta.thinking });
    }
    if (delta.type === 'signature_delta' && typeof delta.signature === 'string') {
      if (open) open.signature += delta.signature;
      return '';
    }
    if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string' && typeof e.index === 'number') {
      const at = this.tools.get(e.index);
      if (at === undefined) throw errors.malformedEvent();
      return delta.partial_json ? this.chunk({ tool_calls: [{ index: at, function: { arguments: delta.partial_json } }] }) : '';
    }
    return '';
  }

  /**
   * A thinking block's end: the block whole, signed, as the plain answer's `thinking_blocks`
   * carries it (its text streamed already as `reasoning_content`), for the client to send back.
   */
  private blockStop(e: Json): string {
    const t = this.thinking;
    if (!t || t.index !== e.index) return '';
    this.thinking = null;
    return t.signature ? this.chunk({ thinking_blocks: [{ type: 'thinking', thinking: t.text, signature: t.signature }] }) : '';
  }
}
