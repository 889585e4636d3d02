/**
 * Anthropic's documented response shapes (API reference: Messages, Streaming Messages,
 * Errors), as zod schemas: what a Messages answer, each stream event and an error body must
 * be for Anthropic's clients to read them. Strict where the reference says a field is
 * required; extra fields pass, as a newer API version may add some.
 */
import { z } from 'zod';

const usage = z.looseObject({
  input_tokens: z.int().nonnegative(),
  output_tokens: z.int().nonnegative(),
  cache_creation_input_tokens: z.int().nonnegative().nullable().optional(),
  cache_read_input_tokens: z.int().nonnegative().nullable().optional(),
});

const contentBlock = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text'), text: z.string() }),
  z.looseObject({ type: z.literal('tool_use'), id: z.string().min(1), name: z.string().min(1), input: z.record(z.string(), z.unknown()) }),
  z.looseObject({ type: z.literal('thinking'), thinking: z.string(), signature: z.string() }),
  z.looseObject({ type: z.literal('redacted_thinking'), data: z.string() }),
]);

const stopReason = z.enum(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'pause_turn', 'refusal']);

export const messageSchema = z.looseObject({
  id: z.string().min(1),
  type: z.literal('message'),
  role: z.literal('assistant'),
  content: z.array(contentBlock),
  model: z.string().min(1),
  stop_reason: stopReason.nullable(),
  stop_sequence: z.string().nullable(),
  usage,
});

export const streamEventSchema = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('message_start'), message: messageSchema.extend({ stop_reason: z.null() }) }),
  z.looseObject({ type: z.literal('content_block_start'), index: z.int().nonnegative(), content_block: contentBlock }),
  z.looseObject({
    type: z.literal('content_block_delta'),
    index: z.int().nonnegative(),
    delta: z.discriminatedUnion('type', [
      z.looseObject({ type: z.literal('text_delta'), text: z.string() }),
      z.looseObject({ type: z.literal('input_json_delta'), partial_json: z.string() }),
      z.looseObject({ type: z.literal('thinking_delta'), thinking: z.string() }),
      z.looseObject({ type: z.literal('signature_delta'), signature: z.string() }),
    ]),
  }),
  z.looseObject({ type: z.literal('content_block_stop'), index: z.int().nonnegative() }),
  z.looseObject({
    type: z.literal('message_delta'),
    delta: z.looseObject({ stop_reason: stopReason.nullable(), stop_sequence: z.string().nullable() }),
    usage: z.looseObject({ output_tokens: z.int().nonnegative() }),
  }),
  z.looseObject({ type: z.literal('message_stop') }),
  z.looseObject({ type: z.literal('ping') }),
  z.looseObject({ type: z.literal('error'), error: z.looseObject({ type: z.string(), message: z.string() }) }),
]);

export const errorSchema = z.strictObject({
  type: z.literal('error'),
  error: z.strictObject({
    type: z.enum([
      'invalid_request_error',
      'authentication_error',
      'billing_error',
      'permission_error',
      'not_found_error',
      'request_too_large',
      'rate_limit_error',
      'api_error',
      'timeout_error',
      'overloaded_error',
    ]),
    message: z.string().min(1),
  }),
});

/** The typed events of an SSE body: `event:` names the type its data carries, as the reference frames them. */
export function streamEvents(text: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const block of text.split('\n\n')) {
    const lines = block.split('\n');
    const name = lines.find((l) => l.startsWith('event:'))?.slice(6).trim();
    const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
    if (!data) continue;
    const event = JSON.parse(data) as Record<string, unknown>;
    if (name !== event.type) throw new Error(`event line "${name}" names another type than its data (${String(event.type)})`);
    out.push(event);
  }
  return out;
}
