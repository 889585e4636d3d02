/**
 * How an Anthropic Messages stream is relayed: typed events (`event:` and `data:`), as they
 * came, read into the answer model by the Messages reader; the answer's content ended at a
 * `message_delta` with a stop reason, and the answer is complete at `message_stop`, which the
 * one relay sends only once the charge is in. A failure after the 200 is Anthropic's own
 * `error` event.
 */
import { MessagesAccount } from '../../upstream/answers/messages.js';
import type { Model } from '../../catalog/catalog.js';
import { errors, type GatewayError, anthropicError } from '../../errors.js';
import { type EventHandler, parseEvent } from '../../upstream/stream/reader.js';

/** Anthropic's error event: what a stream that failed after its 200 ends with. */
export const messagesErrorFrame = (err: GatewayError): string => `event: error\ndata: ${JSON.stringify(anthropicError(err))}\n\n`;

export function messagesEvents(model: Model): EventHandler {
  const renames = model.upstreamModel !== model.id;
  const account = new MessagesAccount();
  let done = false;
  return {
    event(data) {
      const event = parseEvent(data);
      const type = typeof event.type === 'string' ? event.type : '';
      if (type === 'error') throw errors.upstreamFailedMidStream(event.error);
      account.read(event);
      let payload = data;
      if (type === 'message_start' && renames) {
        // The client sees the model it called, not the upstream's name for it.
        const message = (event.message ?? {}) as Record<string, unknown>;
        payload = JSON.stringify({ ...event, message: { ...message, model: model.id } });
      } else if (type === 'message_stop') done = true;
      return `event: ${type || 'message'}\ndata: ${payload}\n\n`;
    },
    complete: () => done,
    answered: () => account.answered(),
    account,
    endFrame: null,
    errorFrame: messagesErrorFrame,
  };
}
