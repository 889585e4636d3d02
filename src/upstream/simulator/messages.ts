/**
 * The simulator's Anthropic Messages API (`kind: "anthropic"`): the request is read as chat,
 * answered by the chat simulator (its prompt cache included: a prefix written on first use,
 * read on the next), and its answer told back as a Message (plain or typed events) through
 * the same translations a real upstream's answer takes, so cache reads and writes come back as
 * `cache_read_input_tokens` and `cache_creation_input_tokens`.
 */
import { anthropicError, GatewayError } from '../../errors.js';
import type { UpstreamCall, UpstreamResponse } from '../client.js';
import { ChatToMessagesEvents } from '../kinds/messages/chat-to-events.js';
import type { Json } from '../kinds/messages/shared.js';
import { chatRequestOf, messageOf } from '../kinds/messages/to-chat.js';
import { jsonResponse, streamResponse } from '../local-response.js';

type ChatRoute = (c: UpstreamCall, body: Json) => UpstreamResponse;

async function* messagesStream(chat: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  const events = new ChatToMessagesEvents();
  for await (const chunk of chat) yield* events.push(chunk);
  yield* events.end();
}

export async function simulateMessages(c: UpstreamCall, body: Json, chat: ChatRoute): Promise<UpstreamResponse> {
  const stream = body.stream === true;
  let request: Json;
  try {
    if (typeof body.max_tokens !== 'number') throw new GatewayError('invalid_request', 'max_tokens: Field required');
    request = chatRequestOf(body, stream);
  } catch (err) {
    if (!(err instanceof GatewayError)) throw err;
    return jsonResponse(400, anthropicError(err));
  }
  const res = chat(c, request);
  if (!stream) return jsonResponse(200, messageOf(JSON.parse(await res.text()) as Json));
  return streamResponse(200, messagesStream(res.body), { 'content-type': 'text/event-stream' });
}
