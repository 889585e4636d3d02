/** The Anthropic Messages request, as its API documents it (unknown fields pass, like Anthropic's). */
import { z } from 'zod';

const cacheControl = { cache_control: z.looseObject({ type: z.literal('ephemeral') }).nullable().optional() };
const source = z.looseObject({ type: z.enum(['base64', 'url', 'text', 'content', 'file']) });

const textBlock = z.looseObject({ type: z.literal('text'), text: z.string(), ...cacheControl });
const block = z.discriminatedUnion('type', [
  textBlock,
  z.looseObject({ type: z.literal('image'), source, ...cacheControl }),
  z.looseObject({ type: z.literal('document'), source, ...cacheControl }),
  z.looseObject({ type: z.literal('tool_use'), id: z.string().min(1), name: z.string().min(1), input: z.looseObject({}), ...cacheControl }),
  z.looseObject({
    type: z.literal('tool_result'),
    tool_use_id: z.string().min(1),
    content: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]).optional(),
    is_error: z.boolean().optional(),
    ...cacheControl,
  }),
  z.looseObject({ type: z.literal('thinking'), thinking: z.string(), signature: z.string() }),
  z.looseObject({ type: z.literal('redacted_thinking'), data: z.string() }),
]);

const message = z.looseObject({
  role: z.enum(['user', 'assistant']),
  content: z.union([z.string(), z.array(block)]),
});

const tool = z.looseObject({ name: z.string().min(1), type: z.string().nullable().optional(), input_schema: z.looseObject({}).optional() });

const toolChoice = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal('tool'), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal('none') }),
]);

const thinking = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('enabled'), budget_tokens: z.int().min(1024) }),
  z.looseObject({ type: z.literal('disabled') }),
]);

/** The fields `count_tokens` reads: everything that is input. */
export const countTokensSchema = z.looseObject({
  model: z.string().min(1),
  // As Anthropic: every message has content but a last assistant one (the start of the answer,
  // a prefill). Translated for another kind, an empty one would be dropped without a word.
  messages: z
    .array(message)
    .min(1)
    .superRefine((list, ctx) => {
      list.forEach((m, i) => {
        if (m.content.length > 0 || (i === list.length - 1 && m.role === 'assistant')) return;
        ctx.addIssue({ code: 'custom', path: [i, 'content'], message: 'must not be empty (only a last assistant message may be)' });
      });
    }),
  system: z.union([z.string(), z.array(textBlock)]).optional(),
  tools: z.array(tool).optional(),
  tool_choice: toolChoice.optional(),
  thinking: thinking.optional(),
  // The gateway's own fields: counted as the Messages call puts them in front of `system`.
  brand: z.string().min(1).optional(),
  knowledge: z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(10)]).optional(),
});

export const messagesSchema = countTokensSchema.extend({
  max_tokens: z.int().positive(),
  stop_sequences: z.array(z.string()).optional(),
  metadata: z.looseObject({ user_id: z.string().nullable().optional() }).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.int().nonnegative().optional(),
  stream: z.boolean().optional(),
});

export type MessagesBody = z.infer<typeof messagesSchema>;
export type CountTokensBody = z.infer<typeof countTokensSchema>;

type Issue = z.core.$ZodIssue;

/** The most specific issue under a union's: the one deepest in the request (a bad block, not just "bad content"). */
function deepest(issue: Issue, prefix: PropertyKey[] = []): Issue {
  const path = [...prefix, ...issue.path];
  if (issue.code !== 'invalid_union' || !issue.errors.length) return { ...issue, path };
  let best: Issue = { ...issue, path };
  for (const alternative of issue.errors) {
    for (const sub of alternative) {
      const found = deepest(sub, path);
      if (found.path.length > best.path.length) best = found;
    }
  }
  return best;
}

/** A failed parse with its first issue made as specific as the schema allows, so the 400 names the field. */
export function specificError(error: z.ZodError): z.ZodError {
  const first = error.issues[0];
  return first ? new z.ZodError([deepest(first)]) : error;
}
