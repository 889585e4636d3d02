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
 * An upper bound of a chat request's prompt tokens that needs no tokenizer: every token of a
 * byte-level BPE (o200k, cl100k, Llama's byte fallback) covers at least one UTF-8 byte, so the
 * bytes of every message's text (and of tool definitions), plus the per-message framing, bound
 * the count. About 4x the real count for English, and computed in microseconds at any size,
 * where tokenizing a long prompt takes milliseconds.
 */
export function promptTokensBound(messages: readonly unknown[], tools?: unknown): number {
  let bound = 3;
  for (const m of messages) {
    bound += 4;
    if (!m || typeof m !== 'object') continue;
    const msg = m as Record<string, unknown>;
    const content = msg.content;
    bound += Buffer.byteLength(contentText(content), 'utf8');
    if (Array.isArray(content)) {
      for (const part of content) {
        if (part && typeof part === 'object' && (part as { type?: unknown }).type !== 'text') {
          bound += Math.ceil(JSON.stringify(part).length / 2);
        }
      }
    }
    if (typeof msg.name === 'string') bound += Buffer.byteLength(msg.name, 'utf8') + 1;
    if (msg.tool_calls !== undefined) bound += Buffer.byteLength(JSON.stringify(msg.tool_calls), 'utf8');
  }
  if (tools !== undefined) bound += Buffer.byteLength(JSON.stringify(tools), 'utf8');
  return bound;
}

/**
 * Prompt tokens of a chat request, estimated from above: the tokens of every message's text
 * (and of tool definitions), plus the per-message framing chat models add, plus a 5% margin.
 * Non-text parts (images, audio) are counted by the length of their JSON, which is generous.
 */
export function estimatePromptTokens(tokenizer: Tokenizer, messages: readonly unknown[], tools?: unknown): number {
  let tokens = 3;
  for (const m of messages) {
    tokens += 4;
    if (!m || typeof m !== 'object') continue;
    const msg = m as Record<string, unknown>;
    const content = msg.content;
    tokens += tokenizer.count(contentText(content));
    if (Array.isArray(content)) {
      for (const part of content) {
        if (part && typeof part === 'object' && (part as { type?: unknown }).type !== 'text') {
          tokens += Math.ceil(JSON.stringify(part).length / 2);
        }
      }
    }
    if (typeof msg.name === 'string') tokens += tokenizer.count(msg.name) + 1;
    if (msg.tool_calls !== undefined) tokens += tokenizer.count(JSON.stringify(msg.tool_calls));
  }
  if (tools !== undefined) tokens += tokenizer.count(JSON.stringify(tools));
  return Math.ceil(tokens * 1.05);
}
