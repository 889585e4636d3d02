/**
 * Chat messages as Gemini `contents`: system and developer messages become the
 * `systemInstruction`; user turns keep role `user`, assistant turns take role `model`; text,
 * images, audio and files become parts; tool calls become `functionCall` parts and tool
 * results `functionResponse` parts (Gemini matches them by function name, so a result's name
 * is read from the call it answers).
 */
import { toolCallSignature } from './gemini-ids.js';
import { absent, isObject, notCarried } from './shared.js';

type Part = Record<string, unknown>;
type Content = { role: 'user' | 'model'; parts: Part[] };

const refuse = (param: string, detail?: string) => notCarried(param, 'gemini', detail);

/** Image types by file extension, for an image given by URL (Gemini needs its MIME type). */
const IMAGE_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  heic: 'image/heic',
  heif: 'image/heif',
  gif: 'image/gif',
};

/** `{contents, systemInstruction?}` for chat `messages`. */
export function contentsOf(messages: unknown): Record<string, unknown> {
  if (!Array.isArray(messages)) throw refuse('messages', 'an array of messages is required');
  const system: Part[] = [];
  const contents: Content[] = [];
  // Tool results name the function they answer only by its call's id.
  const callNames = new Map<string, string>();
  const push = (role: Content['role'], parts: Part[]) => {
    if (parts.length === 0) return;
    const last = contents[contents.length - 1];
    // Consecutive turns of one role are one turn to Gemini (parallel tool results above all).
    if (last && last.role === role) last.parts.push(...parts);
    else contents.push({ role, parts });
  };
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (!isObject(m)) throw refuse(at, 'a message object is required');
    switch (m.role) {
      case 'system':
      case 'developer':
        system.push(...textParts(m.content, at));
        return;
      case 'user':
        push('user', userParts(m.content, at));
        return;
      case 'assistant':
        push('model', assistantParts(m, at, callNames));
        return;
      case 'tool':
        push('user', [toolResult(m, at, callNames)]);
        return;
      default:
        throw refuse(`${at}.role`);
    }
  });
  if (contents.length === 0) throw refuse('messages', 'at least one user or assistant message is required');
  const out: Record<string, unknown> = { contents };
  if (system.length) out.systemInstruction = { parts: system };
  return out;
}

/** Content that must be text (system turns, tool results): a string or text parts. */
function textParts(content: unknown, at: string): Part[] {
  if (absent(content)) return [];
  if (typeof content === 'string') return content ? [{ text: content }] : [];
  if (!Array.isArray(content)) throw refuse(`${at}.content`);
  return content.map((p, j) => {
    if (!isObject(p) || p.type !== 'text' || typeof p.text !== 'string') throw refuse(`${at}.content[${j}].type`, 'only text parts are carried here');
    return { text: p.text };
  });
}

function userParts(content: unknown, at: string): Part[] {
  if (absent(content) || typeof content === 'string') return textParts(content, at);
  if (!Array.isArray(content)) throw refuse(`${at}.content`);
  return content.map((p, j) => userPart(p, `${at}.content[${j}]`));
}

function userPart(p: unknown, at: string): Part {
  if (!isObject(p)) throw refuse(at);
  switch (p.type) {
    case 'text':
      if (typeof p.text !== 'string') throw refuse(`${at}.text`);
      return { text: p.text };
    case 'image_url': {
      // `detail` is a resolution hint Gemini chooses itself.
      const url = isObject(p.image_url) ? p.image_url.url : undefined;
      if (typeof url !== 'string') throw refuse(`${at}.image_url.url`);
      return mediaPart(url, `${at}.image_url.url`);
    }
    case 'input_audio': {
      const audio = isObject(p.input_audio) ? p.input_audio : {};
      if (typeof audio.data !== 'string' || (audio.format !== 'wav' && audio.format !== 'mp3')) throw refuse(`${at}.input_audio`);
      return { inlineData: { mimeType: `audio/${audio.format}`, data: audio.data } };
    }
    case 'file': {
      const file = isObject(p.file) ? p.file : {};
      if (typeof file.file_data !== 'string') throw refuse(`${at}.file.file_id`, 'a file is carried only as `file_data` (a data URL)');
      return mediaPart(file.file_data, `${at}.file.file_data`);
    }
    default:
      throw refuse(`${at}.type`);
  }
}

/** A data URL becomes inline data; an http(s) URL of a known image type a file reference Gemini fetches. */
function mediaPart(url: string, param: string): Part {
  const data = /^data:([^;,]+)(?:;[^,]*)?;base64,(.*)$/s.exec(url);
  if (data) return { inlineData: { mimeType: data[1], data: data[2] } };
  if (/^https?:\/\//i.test(url)) {
    const parsed = URL.canParse(url) ? new URL(url) : null;
    if (!parsed) throw refuse(param, 'the URL is not a valid http(s) URL');
    const ext = /\.([a-z0-9]+)$/i.exec(parsed.pathname)?.[1]?.toLowerCase();
    const mimeType = ext ? IMAGE_TYPES[ext] : undefined;
    if (mimeType) return { fileData: { mimeType, fileUri: url } };
    throw refuse(param, 'give the file as a base64 data URL, or an http(s) URL ending in its image type (.png, .jpg, .webp, ...)');
  }
  throw refuse(param, 'a base64 data URL or an http(s) URL is required');
}

function assistantParts(m: Record<string, unknown>, at: string, callNames: Map<string, string>): Part[] {
  if (!absent(m.audio)) throw refuse(`${at}.audio`);
  if (!absent(m.function_call)) throw refuse(`${at}.function_call`, 'use `tool_calls`');
  const parts: Part[] = [];
  if (typeof m.content === 'string') {
    if (m.content) parts.push({ text: m.content });
  } else if (Array.isArray(m.content)) {
    m.content.forEach((p, j) => {
      if (!isObject(p) || (p.type !== 'text' && p.type !== 'refusal')) throw refuse(`${at}.content[${j}].type`);
      const text = p.type === 'text' ? p.text : p.refusal;
      if (typeof text !== 'string') throw refuse(`${at}.content[${j}]`);
      parts.push({ text });
    });
  } else if (!absent(m.content)) throw refuse(`${at}.content`);
  if (absent(m.tool_calls)) return parts;
  if (!Array.isArray(m.tool_calls)) throw refuse(`${at}.tool_calls`);
  m.tool_calls.forEach((call, k) => {
    const param = `${at}.tool_calls[${k}]`;
    if (!isObject(call) || call.type !== 'function' || !isObject(call.function)) throw refuse(`${param}.type`, 'only function calls are carried');
    const { name, arguments: args } = call.function;
    if (typeof name !== 'string' || !name) throw refuse(`${param}.function.name`);
    if (typeof call.id === 'string') callNames.set(call.id, name);
    const part: Part = { functionCall: { name, args: parsedArguments(args, `${param}.function.arguments`) } };
    // Gemini's thinking models need the signature they gave a call back with it.
    const signature = typeof call.id === 'string' ? toolCallSignature(call.id) : null;
    if (signature) part.thoughtSignature = signature;
    parts.push(part);
  });
  return parts;
}

function parsedArguments(args: unknown, param: string): Record<string, unknown> {
  if (absent(args) || args === '') return {};
  let parsed: unknown;
  try {
    parsed = typeof args === 'string' ? JSON.parse(args) : args;
  } catch {
    throw refuse(param, 'the arguments must be a JSON object');
  }
  if (!isObject(parsed)) throw refuse(param, 'the arguments must be a JSON object');
  return parsed;
}

/** A tool result: its JSON object as it is, any other text as `{output: text}` (the key Gemini reads as a function's output). */
function toolResult(m: Record<string, unknown>, at: string, callNames: Map<string, string>): Part {
  const name = typeof m.tool_call_id === 'string' ? callNames.get(m.tool_call_id) : undefined;
  if (!name) throw refuse(`${at}.tool_call_id`, 'a tool result must answer a tool call of an earlier assistant message');
  const text = textParts(m.content, at)
    .map((p) => p.text as string)
    .join('');
  let response: Record<string, unknown> = { output: text };
  try {
    const parsed: unknown = JSON.parse(text);
    if (isObject(parsed)) response = parsed;
  } catch {
    // Plain text: the output as it is.
  }
  return { functionResponse: { name, response } };
}
