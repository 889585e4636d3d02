/**
 * OpenAI chat completions carried by an Anthropic Messages upstream: system and developer
 * messages as `system`, parts as content blocks (images as base64 or URL sources, PDFs as
 * documents), tool calls as `tool_use` and tool messages as `tool_result` blocks; the Message
 * answer back as a chat completion. A chat feature Messages has no way to carry is a 400 naming it.
 */
import { randomUUID } from 'node:crypto';
import { GatewayError } from '../../../errors.js';
import { cannotCarry, chatFinish, chatUsageOf, isObject, type Json, present } from './shared.js';
import { asksPricedTier } from '../../../billing/service-tiers.js';

/**
 * What a chat body without a cap asks for. Messages requires `max_tokens`; the gateway always
 * puts the held cap in the chat body it translates, so this is a last resort only.
 */
const DEFAULT_MAX_TOKENS = 4096;
/** Thinking budgets for chat's reasoning efforts (`none`: no thinking). */
const BUDGETS: Record<string, number> = { low: 1024, medium: 4096, high: 16_384 };

/** Chat fields Messages cannot carry (when set to anything but their neutral value). */
const UNCARRIED: Record<string, (v: unknown) => boolean> = {
  n: (v) => v !== 1,
  logprobs: (v) => v !== false,
  top_logprobs: () => true,
  logit_bias: () => true,
  frequency_penalty: (v) => v !== 0,
  presence_penalty: (v) => v !== 0,
  seed: () => true,
  audio: () => true,
  modalities: (v) => !(Array.isArray(v) && v.every((m) => m === 'text')),
  prediction: () => true,
  functions: () => true,
  function_call: () => true,
  web_search_options: () => true,
  // A tier billed at the standard price (auto, default, standard_only) asks for nothing
  // Anthropic needs told; another is a price the model would have to carry.
  service_tier: (v) => asksPricedTier(v),
  store: (v) => v !== false,
  metadata: () => true,
  verbosity: () => true,
  response_format: (v) => !(isObject(v) && v.type === 'text'),
};

/** A base64 data URL: its media type, then its data (parameters such as `;name=a.png` may come between). */
const DATA_URL = /^data:([^;,]+)(?:;[^,]*)?;base64,(.*)$/is;

/** A chat image URL (a data URL or a link) as an image source. */
function imageSource(url: unknown, param: string): Json {
  if (typeof url !== 'string') throw cannotCarry(param, 'an image needs a URL.');
  // A data URL may carry parameters before `;base64` (`;name=a.png`); it is never a link.
  const data = DATA_URL.exec(url);
  if (data) return { type: 'base64', media_type: data[1], data: data[2] };
  if (/^data:/i.test(url)) throw cannotCarry(param, 'a data URL must be base64.');
  return { type: 'url', url };
}

function block(part: unknown, param: string): Json {
  if (!isObject(part)) throw cannotCarry(param, 'is not a content part.');
  if (part.type === 'text') return { type: 'text', text: part.text };
  if (part.type === 'image_url') return { type: 'image', source: imageSource(isObject(part.image_url) ? part.image_url.url : undefined, param) };
  if (part.type === 'file' && isObject(part.file) && typeof part.file.file_data === 'string') {
    const data = DATA_URL.exec(part.file.file_data);
    if (data && data[1]?.toLowerCase() === 'application/pdf') return { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: data[2] } };
  }
  throw cannotCarry(param, `a \`${String(part.type)}\` part cannot be sent to the model's upstream (the Anthropic Messages API).`);
}

const blocksOf = (content: unknown, param: string): Json[] =>
  typeof content === 'string' ? (content ? [{ type: 'text', text: content }] : []) : Array.isArray(content) ? content.map((p, j) => block(p, `${param}[${j}]`)) : [];

/** A system or developer message's text: Anthropic's `system` is text only, so any other part is refused. */
function textOf(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((p, j) => {
      if (isObject(p) && p.type === 'text' && typeof p.text === 'string') return p.text;
      throw cannotCarry(`${param}[${j}]`, "only text parts of a system or developer message can be sent to the model's upstream (the Anthropic Messages API).");
    })
    .join('');
}

function toolUse(call: unknown, param: string): Json {
  const fn = isObject(call) && isObject(call.function) ? call.function : null;
  if (!fn || !isObject(call)) throw cannotCarry(param, 'only function tool calls can be sent to the model\'s upstream (the Anthropic Messages API).');
  let input: unknown = {};
  try {
    input = typeof fn.arguments === 'string' && fn.arguments ? JSON.parse(fn.arguments) : {};
  } catch {
    throw cannotCarry(`${param}.function.arguments`, 'is not JSON.');
  }
  return { type: 'tool_use', id: call.id, name: fn.name, input };
}

/**
 * An assistant message's `thinking_blocks` (as the gateway's chat answers carry them) as the
 * signed blocks Anthropic gave: they go back first in the turn, unchanged.
 */
function thinkingBlocks(blocks: unknown, param: string): Json[] {
  if (blocks === undefined || blocks === null) return [];
  if (!Array.isArray(blocks)) throw cannotCarry(param, 'must be an array of thinking blocks.');
  return blocks.map((b, j) => {
    if (isObject(b) && b.type === 'thinking' && typeof b.thinking === 'string' && typeof b.signature === 'string') return { type: 'thinking', thinking: b.thinking, signature: b.signature };
    if (isObject(b) && b.type === 'redacted_thinking' && typeof b.data === 'string') return { type: 'redacted_thinking', data: b.data };
    throw cannotCarry(`${param}[${j}]`, 'is not a thinking block (`thinking` with its `signature`, or `redacted_thinking` with its `data`).');
  });
}

/** The chat messages as `system` text and Messages turns (consecutive tool results in one user turn). */
function turns(messages: unknown[]): { system: string[]; turns: Json[] } {
  const system: string[] = [];
  const out: Json[] = [];
  messages.forEach((m, i) => {
    if (!isObject(m)) return;
    const param = `messages[${i}]`;
    if (m.role === 'system' || m.role === 'developer') system.push(textOf(m.content, `${param}.content`));
    else if (m.role === 'user') out.push({ role: 'user', content: blocksOf(m.content, `${param}.content`) });
    else if (m.role === 'assistant') {
      // Not carried, so refused rather than dropped (a turn of only a function_call would go empty).
      if (present(m.function_call)) throw cannotCarry(`${param}.function_call`, 'use `tool_calls`.');
      if (present(m.audio)) throw cannotCarry(`${param}.audio`, "an earlier audio answer cannot be sent to the model's upstream (the Anthropic Messages API).");
      const content = [...thinkingBlocks(m.thinking_blocks, `${param}.thinking_blocks`), ...blocksOf(m.content, `${param}.content`)];
      if (Array.isArray(m.tool_calls)) content.push(...m.tool_calls.map((c, j) => toolUse(c, `${param}.tool_calls[${j}]`)));
      out.push({ role: 'assistant', content });
    } else if (m.role === 'tool') {
      const result = { type: 'tool_result', tool_use_id: m.tool_call_id, content: typeof m.content === 'string' ? m.content : blocksOf(m.content, `${param}.content`) };
      const last = out[out.length - 1];
      const merges = last?.role === 'user' && Array.isArray(last.content) && (last.content as Json[]).every((b) => b.type === 'tool_result');
      if (merges) (last.content as Json[]).push(result);
      else out.push({ role: 'user', content: [result] });
    } else throw cannotCarry(`${param}.role`, "this role cannot be sent to the model's upstream (the Anthropic Messages API).");
  });
  return { system, turns: out };
}

function messagesTools(tools: unknown[]): Json[] {
  return tools.map((t, i) => {
    const fn = isObject(t) && t.type === 'function' && isObject(t.function) ? t.function : null;
    if (!fn) throw cannotCarry(`tools[${i}]`, "only function tools can be sent to the model's upstream (the Anthropic Messages API).");
    return { name: fn.name, ...(fn.description ? { description: fn.description } : {}), input_schema: fn.parameters ?? { type: 'object', properties: {} } };
  });
}

function toolChoice(choice: unknown, parallel: unknown): Json | null {
  const noParallel = parallel === false ? { disable_parallel_tool_use: true } : {};
  if (choice === undefined || choice === null) return parallel === false ? { type: 'auto', ...noParallel } : null;
  if (choice === 'auto') return { type: 'auto', ...noParallel };
  if (choice === 'required') return { type: 'any', ...noParallel };
  if (choice === 'none') return { type: 'none' };
  if (isObject(choice) && isObject(choice.function)) return { type: 'tool', name: choice.function.name, ...noParallel };
  throw cannotCarry('tool_choice', 'is not a tool choice the Anthropic Messages API has.');
}

/** A chat completions request as a Messages request. Throws 400 for a field Messages cannot carry. */
export function messagesRequestOf(fields: Json, stream: boolean): Json {
  for (const [k, refuses] of Object.entries(UNCARRIED)) {
    if (present(fields[k]) && refuses(fields[k])) throw cannotCarry(k, "the model's upstream (the Anthropic Messages API) cannot carry it.");
  }
  const { system, turns: messages } = turns(Array.isArray(fields.messages) ? fields.messages : []);
  const cap = fields.max_completion_tokens ?? fields.max_tokens;
  const out: Json = { model: fields.model, max_tokens: typeof cap === 'number' ? cap : DEFAULT_MAX_TOKENS, messages };
  if (system.length) out.system = system.join('\n\n');
  // Anthropic takes both from 0 to 1 (chat's temperature goes to 2): out of that, a 400 here
  // naming the field, never the upstream's refusal of what the gateway sent.
  for (const k of ['temperature', 'top_p'] as const) {
    if (!present(fields[k])) continue;
    const v = fields[k];
    if (typeof v !== 'number' || !(v >= 0 && v <= 1)) throw new GatewayError('invalid_request', `Invalid value for '${k}': an Anthropic-served model takes 0 to 1.`, { param: k });
    out[k] = v;
  }
  const stop = fields.stop;
  if (present(stop)) out.stop_sequences = Array.isArray(stop) ? stop : [stop];
  if (Array.isArray(fields.tools) && fields.tools.length) out.tools = messagesTools(fields.tools);
  const choice = toolChoice(fields.tool_choice, fields.parallel_tool_calls);
  if (choice) out.tool_choice = choice;
  if (typeof fields.user === 'string') out.metadata = { user_id: fields.user };
  // `none` (through Responses' reasoning.effort) is no thinking, Anthropic's default. An effort
  // with no budget here (`minimal`, `xhigh`) is refused, never thought at another size.
  if (typeof fields.reasoning_effort === 'string' && fields.reasoning_effort !== 'none') {
    const budget = BUDGETS[fields.reasoning_effort];
    if (budget === undefined) {
      throw new GatewayError('invalid_request', `Invalid value for 'reasoning_effort': an Anthropic-served model takes none, ${Object.keys(BUDGETS).join(', ')}.`, {
        param: 'reasoning_effort',
      });
    }
    if ((out.max_tokens as number) <= budget) {
      throw new GatewayError('invalid_request', `Invalid value for 'reasoning_effort': this effort thinks for up to ${budget} tokens; set max_completion_tokens above that.`, { param: 'reasoning_effort' });
    }
    out.thinking = { type: 'enabled', budget_tokens: budget };
  }
  if (stream) out.stream = true;
  return out;
}

/** A Message as a chat completion. Throws when it is not one. */
export function chatAnswerOf(message: Json): Json {
  if (!Array.isArray(message.content)) throw new Error('no content');
  let text = '';
  let reasoning = '';
  const calls: Json[] = [];
  const thinking: Json[] = [];
  for (const b of message.content) {
    if (!isObject(b)) continue;
    if (b.type === 'text' && typeof b.text === 'string') text += b.text;
    else if (b.type === 'thinking' && typeof b.thinking === 'string') {
      reasoning += b.thinking;
      if (typeof b.signature === 'string' && b.signature) thinking.push({ type: 'thinking', thinking: b.thinking, signature: b.signature });
    } else if (b.type === 'redacted_thinking' && typeof b.data === 'string') thinking.push({ type: 'redacted_thinking', data: b.data });
    else if (b.type === 'tool_use') calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } });
  }
  const msg: Json = { role: 'assistant', content: text || (calls.length ? null : ''), refusal: null };
  if (reasoning) msg.reasoning_content = reasoning;
  // The thinking blocks as Anthropic signed them: a client that sends this message back (an
  // agent's tool loop) gives them back, as Anthropic requires with thinking and tools.
  if (thinking.length) msg.thinking_blocks = thinking;
  if (calls.length) msg.tool_calls = calls;
  return {
    id: typeof message.id === 'string' ? `chatcmpl-${message.id}` : `chatcmpl-${randomUUID()}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: message.model,
    choices: [{ index: 0, message: msg, logprobs: null, finish_reason: chatFinish(message.stop_reason) }],
    usage: chatUsageOf(message.usage),
  };
}
