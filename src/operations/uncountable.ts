/**
 * Inputs the gateway cannot count: text the provider adds to the prompt from what it keeps
 * (a previous response's whole thread, a conversation, a stored prompt template, an item
 * referenced by id, a file by URL or id, or a file inline: a document's bytes say nothing of its
 * tokens, a compact PDF page costs a provider ~1,500), and parts of a type the gateway does not know. Their
 * size is unknown here, so a call that carries one is held at the most the provider can bill
 * for a prompt: the model's whole context length.
 */
import type { TokenHold } from '../billing/billed-call.js';
import type { Model } from '../catalog/catalog.js';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;

/**
 * Responses content parts whose tokens the hold bounds: text by its bytes, images and audio at
 * the model's per-part maximum. A file part never is, whether by reference or inline.
 */
const RESPONSES_PARTS = new Set(['input_text', 'output_text', 'text', 'refusal', 'summary_text', 'input_image', 'input_audio']);
/** Responses input items counted as their whole JSON (messages are counted part by part). */
const RESPONSES_ITEMS = new Set(['message', 'function_call', 'function_call_output', 'custom_tool_call', 'custom_tool_call_output', 'reasoning']);

/** The media type a `data:` URL names, lower-cased; null for any other URL. */
function dataUrlType(url: unknown): string | null {
  if (typeof url !== 'string' || !/^data:/i.test(url)) return null;
  return /^data:([^;,]*)/i.exec(url)![1]!.trim().toLowerCase();
}

/**
 * Whether an image part (chat `image_url`, Responses `input_image`, Messages `image`) carries
 * inline data that is not an image: a PDF, a video or any file sent as an "image" is a document
 * some upstreams (Gemini) take as it is, and bill by its pages or frames, not as one image.
 */
export function inlineNonImage(part: Record<string, unknown>): boolean {
  let type: string | null = null;
  if (part.type === 'image_url') type = dataUrlType(isObject(part.image_url) ? part.image_url.url : part.image_url);
  else if (part.type === 'input_image') type = dataUrlType(part.image_url);
  else if (part.type === 'image' && isObject(part.source)) {
    const source = part.source;
    if (source.type === 'base64') type = typeof source.media_type === 'string' ? source.media_type.trim().toLowerCase() : '';
    else if (source.type === 'url') type = dataUrlType(source.url);
  }
  return type !== null && !type.startsWith('image/');
}

function uncountablePart(part: unknown, known: ReadonlySet<string>): boolean {
  return !isObject(part) || typeof part.type !== 'string' || !known.has(part.type) || inlineNonImage(part);
}

function uncountableParts(parts: unknown): boolean {
  if (!Array.isArray(parts)) return false;
  return parts.some((p) => uncountablePart(p, RESPONSES_PARTS));
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

/**
 * Chat content parts whose tokens the hold bounds; never a `file` part, by id or inline, nor an
 * image part whose inline data is not an image.
 */
const CHAT_PARTS = new Set(['text', 'refusal', 'image_url', 'input_audio']);

/**
 * Whether a chat request carries input the gateway cannot count: a part of an unknown type, a
 * file (by id or inline), or an assistant's `audio` given by the id of an earlier answer.
 */
export function uncountableChatInput(messages: readonly unknown[]): boolean {
  for (const m of messages) {
    if (!isObject(m)) continue;
    if (present(m.audio)) return true;
    if (Array.isArray(m.content) && m.content.some((p) => uncountablePart(p, CHAT_PARTS))) return true;
  }
  return false;
}

/** The hold of a call with input the gateway cannot count: the whole context at the prompt price. */
export function contextLengthHold(model: Model, hold: TokenHold): TokenHold {
  return { ...hold, bound: model.contextLength, estimate: () => model.contextLength };
}
