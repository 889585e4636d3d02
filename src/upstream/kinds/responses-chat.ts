/**
 * OpenAI's Responses API carried over chat completions, for an upstream that speaks another
 * API (composed with that kind's chat translation). The request's input items, instructions
 * and function tools become chat messages and tools; the chat answer becomes a Response
 * object; the stream becomes Responses' typed events (responses-stream.ts). What chat cannot
 * carry (hosted tools, a stored conversation, items by reference, reasoning items) is a 400
 * naming it.
 */
import { incompleteReason, newId, responseShell, responsesUsage } from './responses-shapes.js';
import { ResponsesStream } from './responses-stream.js';
import type { Translation } from './types.js';
import { chatAnswer } from '../answers/chat.js';
import { absent, isObject, notCarried } from './shared.js';

const refuse = (param: string, detail?: string) => notCarried(param, 'non-OpenAI', detail);

/** Fields that pass to chat under the same name (the chat translation decides what it carries). */
const SAME = ['model', 'temperature', 'top_p', 'parallel_tool_calls', 'user', 'safety_identifier', 'prompt_cache_key', 'service_tier'];

/** The chat fields for a Responses request. */
export function responsesToChat(fields: Record<string, unknown>, stream: boolean): Record<string, unknown> {
  const chat: Record<string, unknown> = {};
  const messages: Record<string, unknown>[] = [];
  if (typeof fields.instructions === 'string' && fields.instructions) messages.push({ role: 'system', content: fields.instructions });
  messages.push(...inputMessages(fields.input));
  for (const [key, value] of Object.entries(fields)) {
    if (SAME.includes(key)) {
      if (!absent(value)) chat[key] = value;
      continue;
    }
    if (absent(value)) continue;
    switch (key) {
      case 'input':
      case 'instructions':
      case 'stream':
      // Responses' stream options only shape the events' padding.
      case 'stream_options':
        break;
      case 'max_output_tokens':
        chat.max_completion_tokens = value;
        break;
      case 'tools':
        chat.tools = chatTools(value);
        break;
      case 'tool_choice':
        chat.tool_choice = toolChoice(value);
        break;
      case 'text':
        Object.assign(chat, textFormat(value));
        break;
      case 'reasoning':
        Object.assign(chat, reasoning(value));
        break;
      case 'store':
        if (value !== false) throw refuse(key, 'the response cannot be stored to continue from');
        break;
      case 'background':
      case 'truncation':
        if (value === false || value === 'disabled') break;
        throw refuse(key);
      case 'include':
      case 'metadata':
        if ((Array.isArray(value) && value.length === 0) || (isObject(value) && Object.keys(value).length === 0)) break;
        throw refuse(key);
      default:
        throw refuse(key);
    }
  }
  chat.messages = messages;
  if (stream) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return chat;
}

/** Responses `input` (a string, or message and function items) as chat messages. */
function inputMessages(input: unknown): Record<string, unknown>[] {
  if (absent(input)) return [];
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input)) throw refuse('input');
  const out: Record<string, unknown>[] = [];
  input.forEach((item, i) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw refuse(at);
    const type = item.type ?? 'message';
    if (type === 'message') {
      if (!['user', 'assistant', 'system', 'developer'].includes(item.role as string)) throw refuse(`${at}.role`);
      out.push({ role: item.role, content: messageContent(item.content, item.role === 'assistant', at) });
    } else if (type === 'function_call') {
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string') throw refuse(`${at}.call_id`);
      const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: typeof item.arguments === 'string' ? item.arguments : '{}' } };
      // Calls of one turn are one assistant message, with the text it said before them.
      const last = out[out.length - 1];
      if (last?.role === 'assistant') last.tool_calls = [...((last.tool_calls as unknown[]) ?? []), call];
      else out.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (type === 'function_call_output') {
      if (typeof item.call_id !== 'string') throw refuse(`${at}.call_id`);
      out.push({ role: 'tool', tool_call_id: item.call_id, content: typeof item.output === 'string' ? item.output : messageContent(item.output, false, `${at}.output`) });
    } else {
      throw refuse(`${at}.type`, 'only messages, function calls and function call outputs are carried');
    }
  });
  return out;
}

/** A message's content parts as chat parts (assistant text as plain text). */
function messageContent(content: unknown, assistant: boolean, at: string): unknown {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw refuse(`${at}.content`);
  const parts = content.map((p, j) => {
    const param = `${at}.content[${j}]`;
    if (!isObject(p)) throw refuse(param);
    switch (p.type) {
      case 'input_text':
      case 'output_text':
        return { type: 'text', text: p.text };
      case 'refusal':
        return { type: 'text', text: p.refusal };
      case 'input_image':
        if (typeof p.image_url !== 'string') throw refuse(`${param}.file_id`, 'an image is carried only by `image_url`');
        return { type: 'image_url', image_url: { url: p.image_url, ...(typeof p.detail === 'string' ? { detail: p.detail } : {}) } };
      case 'input_file':
        if (typeof p.file_data !== 'string') throw refuse(`${param}.file_id`, 'a file is carried only as `file_data`');
        return { type: 'file', file: { file_data: p.file_data, ...(typeof p.filename === 'string' ? { filename: p.filename } : {}) } };
      default:
        throw refuse(`${param}.type`);
    }
  });
  return assistant ? parts.map((p) => p.text).join('') : parts;
}

/** Function tools as chat tools; a hosted tool cannot be carried. */
function chatTools(tools: unknown): unknown[] {
  if (!Array.isArray(tools)) throw refuse('tools');
  return tools.map((t, i) => {
    if (!isObject(t) || t.type !== 'function') throw refuse(`tools[${i}].type`, 'only function tools are carried');
    const fn: Record<string, unknown> = { name: t.name };
    if (typeof t.description === 'string') fn.description = t.description;
    if (isObject(t.parameters)) fn.parameters = t.parameters;
    if (typeof t.strict === 'boolean') fn.strict = t.strict;
    return { type: 'function', function: fn };
  });
}

function toolChoice(choice: unknown): unknown {
  if (typeof choice === 'string') return choice;
  if (isObject(choice) && choice.type === 'function' && typeof choice.name === 'string') return { type: 'function', function: { name: choice.name } };
  if (isObject(choice) && choice.type === 'allowed_tools' && Array.isArray(choice.tools)) {
    const tools = choice.tools.map((t, i) => {
      if (!isObject(t) || t.type !== 'function') throw refuse(`tool_choice.tools[${i}]`, 'only function tools are carried');
      return { type: 'function', function: { name: t.name } };
    });
    return { type: 'allowed_tools', allowed_tools: { mode: choice.mode, tools } };
  }
  throw refuse('tool_choice');
}

/** `text.format` as chat's `response_format`, `text.verbosity` as chat's `verbosity`. */
function textFormat(text: unknown): Record<string, unknown> {
  if (!isObject(text)) throw refuse('text');
  const out: Record<string, unknown> = {};
  if (!absent(text.verbosity)) out.verbosity = text.verbosity;
  const format = text.format;
  if (absent(format) || (isObject(format) && format.type === 'text')) return out;
  if (isObject(format) && format.type === 'json_object') out.response_format = { type: 'json_object' };
  else if (isObject(format) && format.type === 'json_schema') {
    const schema: Record<string, unknown> = { ...format };
    delete schema.type;
    out.response_format = { type: 'json_schema', json_schema: schema };
  } else throw refuse('text.format.type');
  return out;
}

/** `reasoning.effort` as chat's `reasoning_effort`; a reasoning summary cannot be carried. */
function reasoning(value: unknown): Record<string, unknown> {
  if (!isObject(value)) throw refuse('reasoning');
  if (!absent(value.summary) || !absent(value.generate_summary)) throw refuse('reasoning.summary');
  return absent(value.effort) ? {} : { reasoning_effort: value.effort };
}

/** The Response object for a chat completion (its first choice). */
export function chatToResponse(chat: Record<string, unknown>, request?: Record<string, unknown>): Record<string, unknown> {
  const choice = Array.isArray(chat.choices) && isObject(chat.choices[0]) ? chat.choices[0] : null;
  if (!choice || !isObject(choice.message)) throw new Error('not a chat completion');
  const message = choice.message;
  const output: Record<string, unknown>[] = [];
  if (typeof message.content === 'string' && message.content) {
    output.push({
      id: newId('msg'),
      type: 'message',
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: message.content, annotations: [], logprobs: [] }],
    });
  }
  for (const call of Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : []) {
    const fn = isObject(call.function) ? call.function : {};
    output.push({ id: newId('fc'), type: 'function_call', status: 'completed', call_id: call.id, name: fn.name, arguments: fn.arguments });
  }
  const reason = incompleteReason(choice.finish_reason);
  const usage = responsesUsage(chat.usage);
  const created = typeof chat.created === 'number' ? chat.created : Math.floor(Date.now() / 1000);
  return {
    ...responseShell(newId('resp'), typeof chat.model === 'string' ? chat.model : 'unknown', created, request),
    status: reason ? 'incomplete' : 'completed',
    incomplete_details: reason ? { reason } : null,
    output,
    ...(usage ? { usage } : {}),
  };
}

/**
 * Chat fields that come from a Responses field of another name. A chat message is built from
 * one or more input items (or the instructions): its index says nothing of theirs.
 */
const RESPONSES_FIELD: Record<string, string> = {
  verbosity: 'text.verbosity',
  response_format: 'text.format',
  reasoning_effort: 'reasoning.effort',
  max_completion_tokens: 'max_output_tokens',
  max_tokens: 'max_output_tokens',
  messages: 'input',
};

export const responsesOverChat: Translation = {
  request: (fields, stream) => ({ path: '/chat/completions', body: responsesToChat(fields, stream) }),
  answer: chatToResponse,
  read: chatAnswer,
  stream: (request) => new ResponsesStream(request),
  ingressNames: RESPONSES_FIELD,
};
