/**
 * Anthropic Messages carried by an OpenAI chat completions upstream: the request as a chat
 * request (system text first, content blocks as parts, tool results as `tool` messages,
 * tools as functions), and the chat answer back as a Message.
 */
import { randomUUID } from 'node:crypto';
import { EXACT_THINKING_BUDGET } from '../shared.js';
import { cannotCarry, isObject, type Json, messagesUsageOf, present, stopReason, answerText } from './shared.js';

/** Messages fields a chat request carries, besides the ones translated below. */
const PASSED = new Set(['model', 'max_tokens', 'temperature', 'top_p', 'stream']);
/** Messages fields translated into chat's own (the rest, when set, cannot be carried). */
const TRANSLATED = new Set(['messages', 'system', 'tools', 'tool_choice', 'stop_sequences', 'metadata', 'thinking']);

/** A data URL or a URL for an image or document `source`; null when the source is of another kind. */
function sourceUrl(source: unknown): string | null {
  if (!isObject(source)) return null;
  if (source.type === 'base64' && typeof source.media_type === 'string' && typeof source.data === 'string') {
    return `data:${source.media_type};base64,${source.data}`;
  }
  if (source.type === 'url' && typeof source.url === 'string') return source.url;
  return null;
}

/** One user content block as a chat part. */
function userPart(block: Json, param: string): Json {
  if (block.type === 'text') return { type: 'text', text: block.text };
  if (block.type === 'image') {
    const url = sourceUrl(block.source);
    if (url) return { type: 'image_url', image_url: { url } };
  }
  if (block.type === 'document') {
    const source = isObject(block.source) ? block.source : {};
    if (source.type === 'text' && typeof source.data === 'string') return { type: 'text', text: source.data };
    if (source.type === 'base64' && typeof source.data === 'string') {
      const filename = typeof block.title === 'string' ? block.title : 'document.pdf';
      return { type: 'file', file: { filename, file_data: `data:${String(source.media_type)};base64,${source.data}` } };
    }
  }
  throw cannotCarry(param, `a \`${String(block.type)}\` block of this source cannot be sent to the model's upstream (an OpenAI chat API).`);
}

/** A tool result's content as a chat tool message's content (text only: chat tool messages carry no images). */
function toolResultContent(content: unknown, param: string): string | Json[] {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((b, i) => {
    if (isObject(b) && b.type === 'text') return { type: 'text', text: b.text };
    throw cannotCarry(`${param}[${i}]`, "only text can be a tool result on the model's upstream (an OpenAI chat API).");
  });
}

/** One Messages message as chat messages (a user turn's tool results come first, as `tool` messages). */
function chatMessages(m: Json, i: number): Json[] {
  const param = `messages[${i}].content`;
  if (typeof m.content === 'string') return [{ role: m.role, content: m.content }];
  const blocks = Array.isArray(m.content) ? (m.content as unknown[]).filter(isObject) : [];
  if (m.role === 'assistant') {
    let text = '';
    const calls: Json[] = [];
    for (const b of blocks) {
      if (b.type === 'text' && typeof b.text === 'string') text += b.text;
      else if (b.type === 'tool_use') calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } });
      // Thinking of an earlier turn: Anthropic itself leaves it out of the context of later ones.
    }
    return [{ role: 'assistant', content: text || null, ...(calls.length ? { tool_calls: calls } : {}) }];
  }
  const out: Json[] = [];
  const parts: Json[] = [];
  blocks.forEach((b, j) => {
    if (b.type === 'tool_result') {
      const content = toolResultContent(b.content, `${param}[${j}].content`);
      out.push({ role: 'tool', tool_call_id: b.tool_use_id, content: b.is_error === true && typeof content === 'string' ? `Error: ${content}` : content });
    } else parts.push(userPart(b, `${param}[${j}]`));
  });
  if (parts.length) out.push({ role: 'user', content: parts });
  return out;
}

function chatTools(tools: unknown[]): Json[] {
  return tools.map((t, i) => {
    if (!isObject(t) || (t.type !== undefined && t.type !== 'custom') || typeof t.name !== 'string') {
      throw cannotCarry(`tools[${i}]`, "only client tools (name, input_schema) can be sent to the model's upstream (an OpenAI chat API).");
    }
    return { type: 'function', function: { name: t.name, ...(t.description ? { description: t.description } : {}), parameters: t.input_schema } };
  });
}

function chatToolChoice(choice: Json): { tool_choice?: unknown; parallel_tool_calls?: boolean } {
  const parallel = choice.disable_parallel_tool_use === true ? { parallel_tool_calls: false } : {};
  switch (choice.type) {
    case 'auto':
      return { tool_choice: 'auto', ...parallel };
    case 'any':
      return { tool_choice: 'required', ...parallel };
    case 'none':
      return { tool_choice: 'none' };
    case 'tool':
      return { tool_choice: { type: 'function', function: { name: choice.name } }, ...parallel };
    default:
      throw cannotCarry('tool_choice.type', 'is not a tool choice.');
  }
}

/** Extended thinking as a reasoning effort: chat reasoning models take an effort, not a budget. */
function reasoningEffort(thinking: Json): string | null {
  if (thinking.type !== 'enabled') return null;
  const budget = typeof thinking.budget_tokens === 'number' ? thinking.budget_tokens : 0;
  return budget <= 2048 ? 'low' : budget <= 8192 ? 'medium' : 'high';
}

/** A Messages request as a chat completions request. Throws 400 for a field chat cannot carry. */
export function chatRequestOf(fields: Json, stream: boolean): Json {
  for (const [k, v] of Object.entries(fields)) {
    if (present(v) && !PASSED.has(k) && !TRANSLATED.has(k)) throw cannotCarry(k, "the model's upstream (an OpenAI chat API) has no such parameter.");
  }
  const out: Json = {};
  for (const k of PASSED) if (present(fields[k])) out[k] = fields[k];
  const messages: Json[] = [];
  const system = fields.system;
  if (typeof system === 'string' && system) messages.push({ role: 'system', content: system });
  else if (Array.isArray(system) && system.length) {
    messages.push({ role: 'system', content: system.map((b) => (isObject(b) ? String(b.text ?? '') : '')).join('\n\n') });
  }
  (fields.messages as unknown[]).forEach((m, i) => {
    if (isObject(m)) messages.push(...chatMessages(m, i));
  });
  out.messages = messages;
  if (Array.isArray(fields.tools) && fields.tools.length) out.tools = chatTools(fields.tools);
  if (isObject(fields.tool_choice)) Object.assign(out, chatToolChoice(fields.tool_choice));
  if (Array.isArray(fields.stop_sequences) && fields.stop_sequences.length) out.stop = fields.stop_sequences;
  if (isObject(fields.metadata) && typeof fields.metadata.user_id === 'string') out.user = fields.metadata.user_id;
  const effort = isObject(fields.thinking) ? reasoningEffort(fields.thinking) : null;
  if (effort) out.reasoning_effort = effort;
  if (isObject(fields.thinking)) {
    const { type, budget_tokens: budget } = fields.thinking;
    if (type === 'disabled') (out as Record<symbol, unknown>)[EXACT_THINKING_BUDGET] = 0;
    else if (type === 'enabled' && typeof budget === 'number') (out as Record<symbol, unknown>)[EXACT_THINKING_BUDGET] = budget;
  }
  // The cap goes as max_completion_tokens, as the chat path sends it: OpenAI's reasoning models
  // refuse max_tokens, which it documents as deprecated.
  if (present(out.max_tokens)) {
    out.max_completion_tokens = out.max_tokens;
    delete out.max_tokens;
  }
  if (stream) out.stream_options = { include_usage: true };
  return out;
}

/** The arguments of a chat tool call as a tool_use `input` (an object, given as one or as its JSON; anything else comes as `{}`). */
export function toolInput(args: unknown): Json {
  if (isObject(args)) return args;
  if (typeof args !== 'string' || !args) return {};
  try {
    const parsed = JSON.parse(args) as unknown;
    return isObject(parsed) ? parsed : {};
  } catch {
    return {};
  }
}

/** A chat completion as a Message. Throws when it is not one. */
export function messageOf(chat: Json): Json {
  const choice = Array.isArray(chat.choices) ? chat.choices[0] : undefined;
  if (!isObject(choice) || !isObject(choice.message)) throw new Error('no choices');
  const msg = choice.message;
  const content: Json[] = [];
  const reasoning = msg.reasoning_content ?? msg.reasoning;
  if (typeof reasoning === 'string' && reasoning) content.push({ type: 'thinking', thinking: reasoning, signature: '' });
  const text = answerText(msg.content);
  if (text) content.push({ type: 'text', text });
  // A chat refusal is its own field; Messages says it as text with the stop reason `refusal`.
  const refused = typeof msg.refusal === 'string' && msg.refusal !== '';
  if (refused) content.push({ type: 'text', text: msg.refusal });
  for (const call of Array.isArray(msg.tool_calls) ? msg.tool_calls : []) {
    if (!isObject(call) || !isObject(call.function)) continue;
    content.push({ type: 'tool_use', id: call.id, name: call.function.name, input: toolInput(call.function.arguments) });
  }
  return {
    id: typeof chat.id === 'string' ? `msg_${chat.id.replace(/^chatcmpl-/, '')}` : `msg_${randomUUID().replaceAll('-', '')}`,
    type: 'message',
    role: 'assistant',
    model: chat.model,
    content,
    stop_reason: refused ? 'refusal' : stopReason(choice.finish_reason),
    stop_sequence: null,
    usage: messagesUsageOf(chat.usage),
  };
}
