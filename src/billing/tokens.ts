/**
 * Token counting with a real tokenizer (gpt-tokenizer, o200k_base). It is loaded when a
 * gateway is created, not at import. Until it has loaded, counts fall back to the UTF-8 byte
 * length, which is never below the token count, so a hold placed that early is still safe.
 */
import { LRUCache } from 'lru-cache';

type CountFn = (text: string) => number;

export interface Tokenizer {
  ready: Promise<void>;
  count(text: string): number;
}

/** Strings up to this long have their counts cached: system prompts and few-shot turns repeat. */
const CACHED_MAX_LENGTH = 8192;

export function createTokenizer(): Tokenizer {
  let counter: CountFn | null = null;
  const cache = new LRUCache<string, number>({ max: 4096 });
  const ready = import('gpt-tokenizer').then(
    (m) => {
      counter = m.countTokens as CountFn;
    },
    () => undefined,
  );
  return {
    ready,
    count(text) {
      if (text.length === 0) return 0;
      if (!counter) return Buffer.byteLength(text, 'utf8');
      if (text.length > CACHED_MAX_LENGTH) return counter(text);
      let n = cache.get(text);
      if (n === undefined) cache.set(text, (n = counter(text)));
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

/**
 * The size of a chat prompt with `measure` applied to each piece of text: every message's text,
 * name and tool calls, and the tool definitions, plus the framing chat models add (3 per
 * prompt, 4 per message). Non-text parts (images, audio) count half the length of their JSON,
 * which is generous.
 */
function promptSize(measure: (text: string) => number, messages: readonly unknown[], tools?: unknown): number {
  let size = 3;
  for (const m of messages) {
    size += 4;
    if (!m || typeof m !== 'object') continue;
    const msg = m as Record<string, unknown>;
    const content = msg.content;
    size += measure(contentText(content));
    if (Array.isArray(content)) {
      for (const part of content) {
        if (part && typeof part === 'object' && (part as { type?: unknown }).type !== 'text') {
          size += Math.ceil(JSON.stringify(part).length / 2);
        }
      }
    }
    if (typeof msg.name === 'string') size += measure(msg.name) + 1;
    if (msg.tool_calls !== undefined) size += measure(JSON.stringify(msg.tool_calls));
  }
  if (tools !== undefined) size += measure(JSON.stringify(tools));
  return size;
}

const utf8Bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/**
 * An upper bound of a chat request's prompt tokens that needs no tokenizer: every token of a
 * byte-level BPE (o200k, cl100k, Llama's byte fallback) covers at least one UTF-8 byte, so the
 * prompt's bytes bound its tokens. About 4x the real count for English, and computed in
 * microseconds at any size, where tokenizing a long prompt takes milliseconds.
 */
export function promptTokensBound(messages: readonly unknown[], tools?: unknown): number {
  return promptSize(utf8Bytes, messages, tools);
}

/** Prompt tokens of a chat request counted with the tokenizer, plus a 5% margin. */
export function estimatePromptTokens(tokenizer: Tokenizer, messages: readonly unknown[], tools?: unknown): number {
  return Math.ceil(promptSize((text) => tokenizer.count(text), messages, tools) * 1.05);
}
