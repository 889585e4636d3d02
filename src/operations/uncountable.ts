/**
 * Inputs the gateway cannot count: text the provider adds to the prompt from what it keeps
 * (a previous response's whole thread, a conversation, a stored prompt template, an item
 * referenced by id, a file by URL or id), and parts of a type the gateway does not know. Their
 * size is unknown here, so a call that carries one is held at the most the provider can bill
 * for a prompt: the model's whole context length.
 */
import type { TokenHold } from '../billing/billed-call.js';
import type { Model } from '../catalog/catalog.js';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;

/**
 * Responses content parts whose tokens the hold bounds: text by its bytes, images and audio at
 * the model's per-part maximum. A file part is counted only when its bytes came inline.
 */
const RESPONSES_PARTS = new Set(['input_text', 'output_text', 'text', 'refusal', 'summary_text', 'input_image', 'input_audio']);
/** Responses input items counted as their whole JSON (messages are counted part by part). */
const RESPONSES_ITEMS = new Set(['message', 'function_call', 'function_call_output', 'custom_tool_call', 'custom_tool_call_output', 'reasoning']);

function uncountablePart(part: unknown, known: ReadonlySet<string>, isFile: (p: Record<string, unknown>) => boolean, inlineFile: (p: Record<string, unknown>) => boolean): boolean {
  if (!isObject(part) || typeof part.type !== 'string') return true;
  if (isFile(part)) return !inlineFile(part);
  return !known.has(part.type);
}

const responsesFile = (p: Record<string, unknown>) => p.type === 'input_file';
/** An `input_file` with its bytes inline (`file_data`) and no reference the provider resolves. */
const responsesInlineFile = (p: Record<string, unknown>) => typeof p.file_data === 'string' && !present(p.file_id) && !present(p.file_url);

function uncountableParts(parts: unknown): boolean {
  if (!Array.isArray(parts)) return false;
  return parts.some((p) => uncountablePart(p, RESPONSES_PARTS, responsesFile, responsesInlineFile));
}

/** The first input of a Responses request the gateway cannot count (its field's name), or null. */
export function uncountableResponsesInput(body: Record<string, unknown>): string | null {
  for (const field of ['previous_response_id', 'conversation', 'prompt']) if (present(body[field])) return field;
  const input = body.input;
  if (!Array.isArray(input)) return null;
  for (const item of input) {
    if (!isObject(item)) return 'input';
    const type = item.type ?? (typeof item.role === 'string' ? 'message' : undefined);
    if (typeof type !== 'string' || !RESPONSES_ITEMS.has(type)) return 'input';
    if (type === 'message' && uncountableParts(item.content)) return 'input';
    // A tool's output may itself be a list of parts (text, images, files).
    if (type.endsWith('_output') && uncountableParts(item.output)) return 'input';
  }
  return null;
}

/** Chat content parts whose tokens the hold bounds; a `file` part only when its bytes came inline. */
const CHAT_PARTS = new Set(['text', 'refusal', 'image_url', 'input_audio']);
const chatFile = (p: Record<string, unknown>) => p.type === 'file';
const chatInlineFile = (p: Record<string, unknown>) =>
  isObject(p.file) && typeof p.file.file_data === 'string' && !present(p.file.file_id);

/**
 * Whether a chat request carries input the gateway cannot count: a part of an unknown type, a
 * file by id, or an assistant's `audio` given by the id of an earlier answer.
 */
export function uncountableChatInput(messages: readonly unknown[]): boolean {
  for (const m of messages) {
    if (!isObject(m)) continue;
    if (present(m.audio)) return true;
    if (Array.isArray(m.content) && m.content.some((p) => uncountablePart(p, CHAT_PARTS, chatFile, chatInlineFile))) return true;
  }
  return false;
}

/** The hold of a call with input the gateway cannot count: the whole context at the prompt price. */
export function contextLengthHold(model: Model, hold: TokenHold): TokenHold {
  return { ...hold, bound: model.contextLength, estimate: () => model.contextLength };
}
