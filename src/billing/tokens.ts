/**
 * Token counting with a real tokenizer (gpt-tokenizer, o200k_base). Its tables are tens of
 * MB, so they are loaded by the first count, not at start: an idle gateway does without them.
 * The load is synchronous, so every count is exact; should the package fail to load, counts
 * fall back to the UTF-8 byte length, which is never below the token count (a hold stays safe).
 */
import { createRequire } from 'node:module';
import { LRUCache } from 'lru-cache';

type CountFn = (text: string) => number;

export interface Tokenizer {
  /** Resolved: the tables load with the first count (kept for callers that await it). */
  ready: Promise<void>;
  count(text: string): number;
}

/** gpt-tokenizer's count, loaded now (Node caches the module for every later caller); null when it cannot load. */
export function loadTokenCounter(): CountFn | null {
  try {
    return (createRequire(import.meta.url)('gpt-tokenizer') as { countTokens: CountFn }).countTokens;
  } catch {
    return null;
  }
}

/** Strings up to this long have their counts cached: system prompts and few-shot turns repeat. */
const CACHED_MAX_LENGTH = 8192;
/** Longer strings are counted in pieces of at most this many characters, cut before whitespace. */
const PIECE = 4096;
/** A run of non-whitespace longer than this is counted in pieces of this length. */
const RUN = 256;
const LONG_RUN = new RegExp(`\\S{${RUN + 1}}`);

/**
 * Counts a long text piece by piece. BPE merging is quadratic in the length of one
 * pre-tokenizer word, so a 900 KB run without spaces (base64, "xxxx...") would take minutes
 * in one go: a denial of service through the prompt estimate. Pieces end just before
 * whitespace, where the pre-tokenizer splits anyway, so ordinary text counts exactly; a run of
 * over 256 non-space characters is cut every 256, which can only add a token at each cut
 * (never undercount, so a hold stays safe).
 */
function countInPieces(counter: CountFn, text: string): number {
  let n = 0;
  let i = 0;
  while (i < text.length) {
    let end = Math.min(text.length, i + PIECE);
    if (end < text.length) {
      for (let j = end; j > i + PIECE / 2; j--) {
        const c = text.charCodeAt(j);
        if (c === 32 || c === 10 || c === 9 || c === 13) {
          end = j;
          break;
        }
      }
    }
    const piece = text.slice(i, end);
    if (LONG_RUN.test(piece)) for (let k = 0; k < piece.length; k += RUN) n += counter(piece.slice(k, k + RUN));
    else n += counter(piece);
    i = end;
  }
  return n;
}

export function createTokenizer(): Tokenizer {
  // undefined: not loaded yet; null: the package could not be loaded.
  let loaded: CountFn | null | undefined;
  const cache = new LRUCache<string, number>({ max: 4096 });
  return {
    ready: Promise.resolve(),
    count(text) {
      if (text.length === 0) return 0;
      if (loaded === undefined) loaded = loadTokenCounter();
      const counter = loaded;
      if (!counter) return Buffer.byteLength(text, 'utf8');
      if (text.length > CACHED_MAX_LENGTH) return countInPieces(counter, text);
      let n = cache.get(text);
      if (n === undefined) cache.set(text, (n = text.length > RUN && LONG_RUN.test(text) ? countInPieces(counter, text) : counter(text)));
      return n;
    },
  };
}

/** Text of a chat message `content`: a string, or the text parts of an array. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    if (part && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string') {
      out += (out ? '\n' : '') + (part as { text: string }).text;
    }
  }
  return out;
}

/** Tokens a chat prompt's non-text parts cost at most, per part (the model's figures). */
export interface PartTokens {
  image: number;
  audio: number;
}

/** What the prompt of a chat request is made of, for billing: every input a provider bills. */
export interface PromptInput {
  messages: readonly unknown[];
  /** `tools`, legacy `functions`, `tool_choice`, `function_call`: each billed as prompt text. */
  extras?: readonly unknown[];
  parts?: PartTokens;
}

export const DEFAULT_PART_TOKENS: PartTokens = { image: 1500, audio: 10_000 };

const IMAGE_PARTS = new Set(['image_url', 'input_image', 'image']);
const AUDIO_PARTS = new Set(['input_audio', 'audio']);

/**
 * The size of a chat prompt with `measure` applied to each piece of text: every message's text
 * and refusal parts, name, tool calls and legacy function call, and the extras (tool and
 * function definitions, tool choice), plus the framing chat models add (3 per prompt, 4 per
 * message). Image and audio parts count the model's per-part maximum; any other part counts
 * its whole JSON, so nothing a provider may bill goes unheld.
 */
function promptSize(measure: (text: string) => number, input: PromptInput): number {
  const parts = input.parts ?? DEFAULT_PART_TOKENS;
  let size = 3;
  for (const m of input.messages) {
    size += 4;
    if (!m || typeof m !== 'object') continue;
    const msg = m as Record<string, unknown>;
    const content = msg.content;
    if (typeof content === 'string') size += measure(content);
    else if (Array.isArray(content)) {
      for (const part of content) {
        if (!part || typeof part !== 'object') continue;
        const p = part as { type?: unknown; text?: unknown; refusal?: unknown };
        if (p.type === 'text' && typeof p.text === 'string') size += measure(p.text);
        else if (p.type === 'refusal' && typeof p.refusal === 'string') size += measure(p.refusal);
        else if (typeof p.type === 'string' && IMAGE_PARTS.has(p.type)) size += parts.image;
        else if (typeof p.type === 'string' && AUDIO_PARTS.has(p.type)) size += parts.audio;
        else size += measure(JSON.stringify(part));
      }
    }
    if (typeof msg.name === 'string') size += measure(msg.name) + 1;
    if (typeof msg.refusal === 'string') size += measure(msg.refusal);
    if (msg.tool_calls !== undefined && msg.tool_calls !== null) size += measure(JSON.stringify(msg.tool_calls));
    if (msg.function_call !== undefined && msg.function_call !== null) size += measure(JSON.stringify(msg.function_call));
    // Anthropic's signed thinking blocks, sent back in a tool loop, are input it bills.
    if (Array.isArray(msg.thinking_blocks)) {
      for (const b of msg.thinking_blocks as Array<{ thinking?: unknown; data?: unknown } | null>) {
        if (typeof b?.thinking === 'string') size += measure(b.thinking);
        else if (typeof b?.data === 'string') size += measure(b.data);
      }
    }
  }
  for (const extra of input.extras ?? []) {
    if (extra === undefined || extra === null) continue;
    size += measure(typeof extra === 'string' ? extra : JSON.stringify(extra));
  }
  return size;
}

const utf8Bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/**
 * An upper bound of a chat request's prompt tokens that needs no tokenizer: every token of a
 * byte-level BPE (o200k, cl100k, Llama's byte fallback) covers at least one UTF-8 byte, so the
 * prompt's bytes bound its tokens. About 4x the real count for English, and computed in
 * microseconds at any size, where tokenizing a long prompt takes milliseconds.
 */
export function promptTokensBound(input: PromptInput): number {
  return promptSize(utf8Bytes, input);
}

/** Prompt tokens of a chat request counted with the tokenizer, without a margin. */
export function countPromptTokens(tokenizer: Tokenizer, input: PromptInput): number {
  return promptSize((text) => tokenizer.count(text), input);
}

/** Prompt tokens of a chat request counted with the tokenizer, plus a 5% margin. */
export function estimatePromptTokens(tokenizer: Tokenizer, input: PromptInput): number {
  return Math.ceil(promptSize((text) => tokenizer.count(text), input) * 1.05);
}
