/**
 * What a Messages request's prompt is made of, for the hold and for `count_tokens`: the
 * system text, every block of every message, the tool definitions and the tool choice.
 * Images count the model's per-image maximum; a document (a PDF by its bytes, a URL, a file)
 * is counted small here and makes the hold the whole context, since its tokens cannot be
 * known from its bytes.
 */
import type { PromptInput } from '../../billing/tokens.js';
import type { Model } from '../../catalog/catalog.js';
import { inlineNonImage } from '../uncountable.js';

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A block as the chat-shaped parts the prompt counter reads (a tool result's content counted part by part). */
function countable(block: unknown): unknown[] {
  if (!isObject(block)) return [block];
  if (block.type === 'document') return [{ type: 'document', title: block.title, context: block.context }];
  if (block.type === 'tool_result') {
    const id = { type: 'text', text: String(block.tool_use_id ?? '') };
    if (typeof block.content === 'string') return [id, { type: 'text', text: block.content }];
    return [id, ...(Array.isArray(block.content) ? block.content.flatMap(countable) : [])];
  }
  return [block];
}

/** The system prompt as text blocks, the gateway's brand and knowledge first. */
export function systemWith(system: unknown, injected: readonly unknown[] | null): unknown {
  if (!injected?.length) return system;
  const own = typeof system === 'string' ? (system ? [{ type: 'text', text: system }] : []) : Array.isArray(system) ? system : [];
  return [...injected.map((m) => ({ type: 'text', text: (m as { content: string }).content })), ...own];
}

export function messagesPrompt(model: Pick<Model, 'maxTokensPerImage' | 'maxTokensPerAudio'>, fields: Json): PromptInput {
  const messages: unknown[] = [];
  const system = fields.system;
  if (typeof system === 'string' || Array.isArray(system)) messages.push({ role: 'system', content: system });
  for (const m of Array.isArray(fields.messages) ? fields.messages : []) {
    if (isObject(m) && Array.isArray(m.content)) messages.push({ role: m.role, content: m.content.flatMap(countable) });
    else messages.push(m);
  }
  return { messages, extras: [fields.tools, fields.tool_choice], parts: { image: model.maxTokensPerImage, audio: model.maxTokensPerAudio } };
}

/**
 * Whether a request carries a document, whose tokens the gateway cannot count: a document
 * block, or an image block whose inline data is not an image (a PDF sent as an image).
 */
export function hasDocument(messages: unknown): boolean {
  const blocks = (content: unknown): boolean =>
    Array.isArray(content) &&
    content.some((b) => isObject(b) && (b.type === 'document' || inlineNonImage(b) || (b.type === 'tool_result' && blocks(b.content))));
  return Array.isArray(messages) && messages.some((m) => isObject(m) && blocks(m.content));
}
