/**
 * A chat completions stream as Responses' typed events: `response.created` and
 * `.in_progress` at the first chunk; a message item (`output_item.added`,
 * `content_part.added`, `output_text.delta`...) for the text; one `function_call` item per
 * tool call (`function_call_arguments.delta`...); at the chat stream's `[DONE]`, every item's
 * `.done` events and `response.completed` (or `response.incomplete`) with the usage. A chat
 * stream cut before `[DONE]` ends without a terminal event, so it reads as cut.
 */
import { errors } from '../../errors.js';
import { EventTranslator } from './event-translator.js';
import { incompleteReason, newId, responseShell, responsesUsage } from './responses-shapes.js';
import { eventData, isObject } from './shared.js';


type Item = Record<string, unknown>;
interface OpenMessage {
  item: Item;
  text: string;
  index: number;
}
interface OpenCall {
  item: Item;
  args: string;
  index: number;
}

export class ResponsesStream extends EventTranslator {
  private sequence = 0;
  private response: Record<string, unknown> | null = null;
  private readonly output: Item[] = [];
  private message: OpenMessage | null = null;
  /** Tool calls by their chat index, in the order they came. */
  private readonly calls = new Map<number, OpenCall>();
  private finish: unknown = null;
  private usage: Record<string, unknown> | null = null;
  private done = false;

  /** `request`: the client's fields, which the Response echoes. */
  constructor(private readonly request?: Record<string, unknown>) {
    super();
  }

  protected override stopped(): boolean {
    return this.done;
  }

  private emit(type: string, data: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.sequence++, ...data })}\n\n`;
  }

  protected event(data: string): string {
    if (data === '[DONE]') return this.complete();
    const chunk = eventData(data);
    if (chunk.error) throw errors.upstreamFailedMidStream(chunk.error);
    let out = this.start(chunk);
    const usage = responsesUsage(chunk.usage);
    if (usage) this.usage = usage;
    const choice = Array.isArray(chunk.choices) ? chunk.choices.find((c) => isObject(c) && (c.index ?? 0) === 0) : undefined;
    if (!isObject(choice)) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string' && delta.content) out += this.text(delta.content);
    for (const call of Array.isArray(delta.tool_calls) ? delta.tool_calls.filter(isObject) : []) out += this.toolCall(call);
    if (typeof choice.finish_reason === 'string') this.finish = choice.finish_reason;
    return out;
  }

  private start(chunk: Record<string, unknown>): string {
    if (this.response) return '';
    const created = typeof chunk.created === 'number' ? chunk.created : Math.floor(Date.now() / 1000);
    this.response = responseShell(newId('resp'), typeof chunk.model === 'string' ? chunk.model : 'unknown', created, this.request);
    return this.emit('response.created', { response: this.response }) + this.emit('response.in_progress', { response: this.response });
  }

  private text(delta: string): string {
    let out = '';
    if (!this.message) {
      const item = { id: newId('msg'), type: 'message', role: 'assistant', status: 'in_progress', content: [] };
      this.message = { item, text: '', index: this.output.length };
      this.output.push(item);
      out += this.emit('response.output_item.added', { output_index: this.message.index, item });
      out += this.emit('response.content_part.added', {
        item_id: item.id,
        output_index: this.message.index,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
      });
    }
    this.message.text += delta;
    return out + this.emit('response.output_text.delta', { item_id: this.message.item.id, output_index: this.message.index, content_index: 0, delta, logprobs: [] });
  }

  private toolCall(call: Record<string, unknown>): string {
    const key = typeof call.index === 'number' ? call.index : this.calls.size;
    const fn = isObject(call.function) ? call.function : {};
    let out = '';
    let open = this.calls.get(key);
    if (!open) {
      // The text before a call is done once the call starts.
      out += this.closeMessage();
      const item = { id: newId('fc'), type: 'function_call', status: 'in_progress', call_id: call.id, name: fn.name, arguments: '' };
      open = { item, args: '', index: this.output.length };
      this.calls.set(key, open);
      this.output.push(item);
      out += this.emit('response.output_item.added', { output_index: open.index, item });
    }
    const piece = fn.arguments;
    if (typeof piece === 'string' && piece) {
      open.args += piece;
      out += this.emit('response.function_call_arguments.delta', { item_id: open.item.id, output_index: open.index, delta: piece });
    }
    return out;
  }

  private closeMessage(): string {
    const m = this.message;
    if (!m) return '';
    this.message = null;
    const part = { type: 'output_text', text: m.text, annotations: [], logprobs: [] };
    const item: Item = { ...m.item, status: 'completed', content: [part] };
    this.output[m.index] = item;
    const at = { item_id: item.id, output_index: m.index, content_index: 0 };
    return (
      this.emit('response.output_text.done', { ...at, text: m.text, logprobs: [] }) +
      this.emit('response.content_part.done', { ...at, part }) +
      this.emit('response.output_item.done', { output_index: m.index, item })
    );
  }

  private complete(): string {
    this.done = true;
    let out = this.start({}) + this.closeMessage();
    for (const call of this.calls.values()) {
      const item: Item = { ...call.item, status: 'completed', arguments: call.args };
      this.output[call.index] = item;
      out += this.emit('response.function_call_arguments.done', { item_id: item.id, output_index: call.index, name: item.name, arguments: call.args });
      out += this.emit('response.output_item.done', { output_index: call.index, item });
    }
    const reason = incompleteReason(this.finish);
    const response = {
      ...this.response,
      status: reason ? 'incomplete' : 'completed',
      incomplete_details: reason ? { reason } : null,
      output: this.output,
      ...(this.usage ? { usage: this.usage } : {}),
    };
    return out + this.emit(reason ? 'response.incomplete' : 'response.completed', { response });
  }
}
