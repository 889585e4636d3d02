/**
 * The simulator's Anthropic Messages API (`kind: "anthropic"`): the request is read as chat,
 * answered by the chat simulator, and its answer told back as a Message (plain or typed
 * events), through the same translations a real upstream's answer takes. Its prompt cache
 * always hits: the input up to the last block marked `cache_control` is reported as read from
 * the cache (`cache_read_input_tokens`), so cached-token billing can be tried without a
 * provider.
 */
import { anthropicError, GatewayError } from '../../errors.js';
import { contentText, type Tokenizer } from '../../billing/tokens.js';
import type { UpstreamCall, UpstreamResponse } from '../client.js';
import { ChatToMessagesEvents } from '../kinds/messages/chat-to-events.js';
import { isObject, type Json } from '../kinds/messages/shared.js';
import { chatRequestOf, messageOf } from '../kinds/messages/to-chat.js';
import { jsonResponse, streamResponse } from '../local-response.js';
import { SseParser } from '../stream/sse.js';

type ChatRoute = (c: UpstreamCall, body: Json) => UpstreamResponse;

const encoder = new TextEncoder();

/** The tokens of the input up to and including the last block marked for caching. */
function cachedTokens(body: Json, tokenizer: Tokenizer): number {
  const blocks: Json[] = [];
  if (Array.isArray(body.system)) blocks.push(...body.system.filter(isObject));
  for (const m of Array.isArray(body.messages) ? body.messages : []) {
    if (isObject(m) && Array.isArray(m.content)) blocks.push(...m.content.filter(isObject));
  }
  let last = -1;
  blocks.forEach((b, i) => {
    if (isObject(b.cache_control)) last = i;
  });
  return blocks.slice(0, last + 1).reduce((n, b) => n + tokenizer.count(contentText([b])), 0);
}

/** The chat usage with `cached` of its prompt tokens read from the cache. */
function withCache(usage: unknown, cached: number): unknown {
  if (!isObject(usage) || typeof usage.prompt_tokens !== 'number') return usage;
  return { ...usage, prompt_tokens_details: { cached_tokens: Math.min(cached, usage.prompt_tokens) } };
}

async function* cachedStream(body: AsyncIterable<Uint8Array>, cached: number): AsyncIterable<Uint8Array> {
  const parser = new SseParser();
  const reframe = (events: string[]) =>
    events.map((data) => {
      if (data === '[DONE]' || !data.includes('"usage"')) return encoder.encode(`data: ${data}\n\n`);
      const chunk = JSON.parse(data) as Json;
      return encoder.encode(`data: ${JSON.stringify({ ...chunk, usage: withCache(chunk.usage, cached) })}\n\n`);
    });
  for await (const chunk of body) yield* reframe(parser.push(chunk));
  yield* reframe(parser.end().events);
}

async function* messagesStream(chat: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  const events = new ChatToMessagesEvents();
  for await (const chunk of chat) yield* events.push(chunk);
  yield* events.end();
}

export async function simulateMessages(c: UpstreamCall, body: Json, tokenizer: Tokenizer, chat: ChatRoute): Promise<UpstreamResponse> {
  const stream = body.stream === true;
  let request: Json;
  try {
    if (typeof body.max_tokens !== 'number') throw new GatewayError('invalid_request', 'max_tokens: Field required');
    request = chatRequestOf(body, stream);
  } catch (err) {
    if (!(err instanceof GatewayError)) throw err;
    return jsonResponse(400, anthropicError(err));
  }
  const cached = cachedTokens(body, tokenizer);
  const res = chat(c, request);
  if (!stream) {
    const answer = JSON.parse(await res.text()) as Json;
    return jsonResponse(200, messageOf({ ...answer, usage: withCache(answer.usage, cached) }));
  }
  return streamResponse(200, messagesStream(cachedStream(res.body, cached)), { 'content-type': 'text/event-stream' });
}
