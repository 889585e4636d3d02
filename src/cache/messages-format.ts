/**
 * Anthropic Messages answers as cache entries (see format.ts): a stream's events are collected
 * block by block into the Message they stand for, and a Message is replayed as the events of
 * its stream (message_start, each block's start, delta and stop, message_delta with the stop
 * reason and usage, message_stop).
 */
import type { Usage } from '../billing/usage.js';
import { type CacheFormat, type Collector, isObject, sse } from './format.js';

/** A Messages `usage` for the answer model's usage, when no event carried one. */
function messagesUsage(u: Usage): Record<string, unknown> {
  const cached = u.cachedPrompt ?? 0;
  const written = u.cacheWrite ?? 0;
  return { input_tokens: u.prompt - cached - written, cache_creation_input_tokens: written, cache_read_input_tokens: cached, output_tokens: u.completion };
}

class MessageCollector implements Collector {
  private message: Record<string, unknown> | null = null;
  private readonly blocks: Record<string, unknown>[] = [];
  /** Per block index: the tool input's JSON as it streamed. */
  private readonly json = new Map<number, string>();
  private usage: Record<string, unknown> = {};
  private stopped = false;

  event(data: string): void {
    let event: unknown;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    if (!isObject(event)) return;
    const index = typeof event.index === 'number' ? event.index : 0;
    switch (event.type) {
      case 'message_start':
        if (isObject(event.message)) {
          this.message = { ...event.message };
          if (isObject(event.message.usage)) this.usage = { ...event.message.usage };
        }
        break;
      case 'content_block_start':
        if (isObject(event.content_block)) this.blocks[index] = { ...event.content_block };
        break;
      case 'content_block_delta': {
        const block = this.blocks[index];
        const delta = isObject(event.delta) ? event.delta : {};
        if (!block) break;
        if (delta.type === 'text_delta' && typeof delta.text === 'string') block.text = `${typeof block.text === 'string' ? block.text : ''}${delta.text}`;
        else if (delta.type === 'thinking_delta' && typeof delta.thinking === 'string') block.thinking = `${typeof block.thinking === 'string' ? block.thinking : ''}${delta.thinking}`;
        else if (delta.type === 'signature_delta') block.signature = delta.signature;
        else if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string') this.json.set(index, (this.json.get(index) ?? '') + delta.partial_json);
        else if (delta.type === 'citations_delta') block.citations = [...(Array.isArray(block.citations) ? block.citations : []), delta.citation];
        break;
      }
      case 'content_block_stop': {
        const partial = this.json.get(index);
        const block = this.blocks[index];
        if (block && partial !== undefined) {
          try {
            block.input = partial ? JSON.parse(partial) : {};
          } catch {
            block.input = {};
          }
        }
        break;
      }
      case 'message_delta':
        if (this.message && isObject(event.delta)) Object.assign(this.message, event.delta);
        if (isObject(event.usage)) for (const [k, v] of Object.entries(event.usage)) if (v !== null && v !== undefined) this.usage[k] = v;
        break;
      case 'message_stop':
        this.stopped = true;
        break;
    }
  }

  body(usage: Usage): Record<string, unknown> | null {
    if (!this.message || !this.stopped || !this.message.stop_reason) return null;
    const reported = typeof this.usage.output_tokens === 'number' && typeof this.usage.input_tokens === 'number';
    return { ...this.message, content: this.blocks.filter(Boolean), usage: reported ? this.usage : messagesUsage(usage) };
  }
}

/** A block's opening (its streamed fields empty) and the deltas that fill it. */
function blockEvents(block: Record<string, unknown>): { start: Record<string, unknown>; deltas: Record<string, unknown>[] } {
  switch (block.type) {
    case 'text': {
      const { text, ...rest } = block;
      return { start: { ...rest, text: '' }, deltas: [{ type: 'text_delta', text: typeof text === 'string' ? text : '' }] };
    }
    case 'thinking': {
      const { thinking, signature, ...rest } = block;
      const deltas: Record<string, unknown>[] = [{ type: 'thinking_delta', thinking: typeof thinking === 'string' ? thinking : '' }];
      if (typeof signature === 'string') deltas.push({ type: 'signature_delta', signature });
      return { start: { ...rest, thinking: '', signature: '' }, deltas };
    }
    case 'tool_use':
    case 'server_tool_use': {
      const { input, ...rest } = block;
      return { start: { ...rest, input: {} }, deltas: [{ type: 'input_json_delta', partial_json: JSON.stringify(input ?? {}) }] };
    }
    default:
      return { start: block, deltas: [] };
  }
}

export const messagesFormat: CacheFormat = {
  stream(entry) {
    const { content, usage, stop_reason, stop_sequence, ...message } = entry.body;
    const full = isObject(usage) ? usage : messagesUsage(entry.usage);
    let out = sse({ type: 'message_start', message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...full, output_tokens: 0 } } }, 'message_start');
    (Array.isArray(content) ? content : []).forEach((block, index) => {
      if (!isObject(block)) return;
      const { start, deltas } = blockEvents(block);
      out += sse({ type: 'content_block_start', index, content_block: start }, 'content_block_start');
      for (const delta of deltas) out += sse({ type: 'content_block_delta', index, delta }, 'content_block_delta');
      out += sse({ type: 'content_block_stop', index }, 'content_block_stop');
    });
    out += sse({ type: 'message_delta', delta: { stop_reason: stop_reason ?? 'end_turn', stop_sequence: stop_sequence ?? null }, usage: full }, 'message_delta');
    return out + sse({ type: 'message_stop' }, 'message_stop');
  },
  collect: () => new MessageCollector(),
};
