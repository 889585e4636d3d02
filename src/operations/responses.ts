/**
 * POST /responses (OpenAI's Responses API), plain and streamed. Same lifecycle as chat: the
 * hold is the prompt's worst case (`input`, `instructions`, `tools`, `tool_choice`, `text`)
 * plus `max_output_tokens` (else the model's `maxOutputTokens`); the debit is the usage the
 * upstream reports (`usage.input_tokens` / `output_tokens`, on a stream in
 * `response.completed`), else the produced output counted with the tokenizer. `brand` and
 * `knowledge` are consumed by the gateway: their text goes in front of `instructions`.
 * Input the gateway cannot count (a previous response, a conversation, a stored prompt, items
 * and files by reference) is held at the model's whole context; a previous response only by the
 * account that created it. Hosted tools go upstream only when the model prices them, held at
 * their most calls and billed per call the answer reports.
 */
import { z } from 'zod';
import { ResponsesOutput, responseOutput } from '../billing/output.js';
import { countPromptTokens, estimatePromptTokens, type PromptInput, promptTokensBound } from '../billing/tokens.js';
import { type Usage, usageOf } from '../billing/usage.js';
import type { Model } from '../catalog/catalog.js';
import { CONTEXT_FIELDS } from '../context/inject.js';
import { errors, GatewayError } from '../errors.js';
import { withoutFields } from '../http/objects.js';
import { type EventHandler, eventReader, overReader, parseEvent } from '../upstream/stream/reader.js';
import { type Redact, redactedDeep, upstreamKeysRedactor } from '../upstream/key-redactor.js';
import { hostedToolsHold, ToolCallCounter, withToolCalls } from './hosted-tools.js';
import { checkItemOwner, checkResponseOwner, keepResponseOwner } from './response-owners.js';
import { capWithin, checkContextWindow, checkOutputCap, textModel, zodError } from './shared.js';
import { promptHold, textOperation } from './text.js';
import { contextLengthHold, uncountableResponsesInput } from './uncountable.js';

const item = z.looseObject({ type: z.string().optional(), role: z.string().optional() });

const responsesSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(item)]).optional(),
  instructions: z.string().nullable().optional(),
  max_output_tokens: z.int().positive().nullable().optional(),
  stream: z.boolean().nullable().optional(),
  // Work that finishes after the call cannot be metered by it.
  background: z.literal(false).nullable().optional(),
  tools: z.array(z.unknown()).nullable().optional(),
  max_tool_calls: z.int().positive().nullable().optional(),
  previous_response_id: z.string().min(1).nullable().optional(),
  prompt: z.looseObject({}).nullable().optional(),
  tool_choice: z.union([z.string(), z.looseObject({})]).nullable().optional(),
  text: z.looseObject({}).nullable().optional(),
  temperature: z.number().nullable().optional(),
  top_p: z.number().nullable().optional(),
  brand: z.string().min(1).optional(),
  knowledge: z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(10)]).optional(),
  // The API's own fields, typed as OpenAI checks them: a wrong type is the client's 400 here,
  // not a request relayed for the upstream to refuse.
  conversation: z.union([z.string().min(1), z.looseObject({ id: z.string().min(1) })]).nullable().optional(),
  metadata: z.record(z.string().max(64), z.string().max(512)).nullable().optional(),
  store: z.boolean().nullable().optional(),
  truncation: z.enum(['auto', 'disabled']).nullable().optional(),
  include: z.array(z.string()).nullable().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  reasoning: z
    .looseObject({ effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).nullable().optional() })
    .nullable()
    .optional(),
  top_logprobs: z.int().min(0).max(20).nullable().optional(),
  user: z.string().nullable().optional(),
});

const TEXT_PARTS = new Set(['input_text', 'output_text', 'text']);

/**
 * The input as chat-shaped messages for the prompt estimate and for knowledge retrieval:
 * text parts become `text` parts, image / audio / file parts keep their type (held at the
 * model's per-part maximum or their whole JSON), and items that are not messages (function
 * calls and their outputs, reasoning) are counted as their whole JSON.
 */
function asMessages(input: unknown): unknown[] {
  if (input === undefined) return [];
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  return (input as Array<Record<string, unknown>>).map((it) => {
    if (typeof it.role === 'string' && (typeof it.content === 'string' || Array.isArray(it.content))) {
      const content =
        typeof it.content === 'string'
          ? it.content
          : (it.content as unknown[]).map((p) => {
              const part = p as { type?: unknown; text?: unknown } | null;
              return part && typeof part.type === 'string' && TEXT_PARTS.has(part.type) && typeof part.text === 'string'
                ? { type: 'text', text: part.text }
                : p;
            });
      return { role: it.role, content };
    }
    return { role: 'tool', content: JSON.stringify(it) };
  });
}

const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

export const createResponse = textOperation({
  path: '/responses',
  async plan(core, ctx, body) {
    const checked = responsesSchema.safeParse(body);
    if (!checked.success) throw zodError(checked.error, body);
    const req = checked.data;
    if (req.input === undefined && !req.instructions && !req.prompt) {
      throw new GatewayError('invalid_request', "Invalid value for 'input': is required", { param: 'input' });
    }
    const model = await textModel(core, ctx, body, req.model);
    checkOutputCap(model, { max_output_tokens: req.max_output_tokens });
    const tools = hostedToolsHold(model, ctx.key, req.tools, req.max_tool_calls);
    // A thread is continued, and a stored item used, only by the account that was given it (the
    // upstream cannot tell tenants apart).
    if (req.previous_response_id) await checkResponseOwner(core, req.previous_response_id, ctx.key.accountId);
    await checkItemOwner(core, storedItemIds(req.input), ctx.key.accountId);
    // A conversation is made through the upstream's own API, which the gateway does not serve:
    // none is any account's, so none is any tenant's to read or add to.
    if (req.conversation) {
      const id = typeof req.conversation === 'string' ? req.conversation : req.conversation.id;
      throw new GatewayError('not_found', `Conversation with id '${id.slice(0, 200)}' not found.`, { param: 'conversation' });
    }

    const messages = asMessages(req.input);
    const injected = await core.context.apply(ctx.key.accountId, req, messages);
    const context = (injected ?? []).map((m) => (m as { content: string }).content);
    const instructions = context.length ? [...context, ...(req.instructions ? [req.instructions] : [])].join('\n\n') : req.instructions;
    const input: PromptInput = {
      messages: instructions ? [{ role: 'system', content: instructions }, ...messages] : messages,
      extras: [req.tools, req.tool_choice, req.text],
      parts: { image: model.maxTokensPerImage, audio: model.maxTokensPerAudio },
    };
    const bound = promptTokensBound(input);
    checkContextWindow(model, bound, () => countPromptTokens(core.tokenizer, input), 'input');
    let estimate: number | undefined;
    const promptTokens = () => (estimate ??= estimatePromptTokens(core.tokenizer, input));
    const counted = { bound, estimate: promptTokens, maxOutput: req.max_output_tokens ?? model.maxOutputTokens, tools };
    // The owner of a response id ('' for none) and of output item ids.
    const owner = (id: unknown, items: readonly string[] = []) =>
      keepResponseOwner(core, typeof id === 'string' ? id : '', ctx.key.accountId, ctx.requestId, items);
    return {
      model,
      hold: uncountableResponsesInput(body) ? contextLengthHold(model, counted) : counted,
      stream: req.stream === true,
      promptTokens,
      holdFor(fields) {
        const messages = asMessages(Array.isArray(fields.input) || typeof fields.input === 'string' ? fields.input : undefined);
        const text = typeof fields.instructions === 'string' ? fields.instructions : null;
        const replaced: PromptInput = {
          messages: text ? [{ role: 'system', content: text }, ...messages] : messages,
          extras: [fields.tools, fields.tool_choice, fields.text],
          parts: input.parts,
        };
        const asked = typeof fields.max_output_tokens === 'number' ? fields.max_output_tokens : 0;
        const hold = { ...promptHold(core, replaced, Math.max(req.max_output_tokens ?? model.maxOutputTokens, asked)), tools };
        return uncountableResponsesInput(fields) ? contextLengthHold(model, hold) : hold;
      },
      unchanged: !injected && !('brand' in body) && !('knowledge' in body),
      // No cap asked for: the upstream gets the model's, which is what was held.
      cap: req.max_output_tokens
          ? { field: 'max_output_tokens', tokens: req.max_output_tokens, names: ['max_output_tokens'], sent: true }
          : { field: 'max_output_tokens', tokens: capWithin(model, model.maxOutputTokens, bound, promptTokens), names: ['max_output_tokens'], sent: false },
      fields(served) {
        // The gateway's own fields (brand, knowledge) never go upstream.
        const out = withoutFields(body, CONTEXT_FIELDS);
        out.model = served.upstreamModel;
        if (injected) out.instructions = instructions;
        return out;
      },
      events(served, apiKey) {
        const watch = new StreamWatch(new ToolCallCounter(model, req.tools), owner);
        const reader = eventReader(responseEvents(served, upstreamKeysRedactor(core.cfg), (event) => watch.event(event)), apiKey);
        return withToolCalls(overReader(reader, { kept: () => watch.kept() }), () => watch.calls.calls());
      },
      answer(answer) {
        const calls = new ToolCallCounter(model, req.tools);
        calls.output(answer.output);
        return {
          usage: usageOf(answer.usage, 'input_tokens', 'output_tokens'),
          output: () => responseOutput(answer.output),
          tools: calls.calls(),
          remember: () => owner(answer.id, itemIdsOf(answer.output)),
          failed: answer.status === 'failed',
        };
      },
    };
  },
});

/**
 * The ids of stored items an input uses: each item reference (`type: "item_reference"`, or an
 * item with neither a type nor a role, as the API takes one), and each reasoning item given by
 * id without its encrypted content (the upstream then reads it from what it stored). Items that
 * carry their content are used as given. Throws 400 for a reference without an id.
 */
function storedItemIds(input: unknown): string[] {
  if (!Array.isArray(input)) return [];
  const ids: string[] = [];
  input.forEach((it: Record<string, unknown>, i) => {
    if (it.type === 'item_reference' || (it.type === undefined && it.role === undefined)) {
      if (typeof it.id !== 'string' || !it.id) throw new GatewayError('invalid_request', `Invalid value for 'input[${i}].id': an item reference needs an id`, { param: 'input' });
      ids.push(it.id);
    } else if (it.type === 'reasoning' && typeof it.id === 'string' && typeof it.encrypted_content !== 'string') ids.push(it.id);
  });
  return ids;
}

/** The ids of an answer's output items. */
const itemIdsOf = (output: unknown): string[] =>
  Array.isArray(output) ? output.flatMap((it: { id?: unknown } | null) => (typeof it?.id === 'string' && it.id ? [it.id] : [])) : [];

/**
 * What the gateway keeps of a streamed response besides its frames: its id's owner, recorded
 * as soon as the first event names it, and its output items' as each is done (awaited together
 * before a complete answer's last event goes out: an id is used after the answer ends, maybe
 * at once on another instance), and the hosted tool calls its output items report.
 */
class StreamWatch {
  private responseId: string | null = null;
  private readonly owned = new Set<string>();
  private readonly records: Promise<void>[] = [];
  constructor(
    readonly calls: ToolCallCounter,
    private readonly owner: (id: string, items?: readonly string[]) => Promise<void>,
  ) {}

  /** The owner records made so far, settled (they never reject). */
  kept(): Promise<void> {
    return Promise.all(this.records).then(() => {});
  }

  event(event: Record<string, unknown>): void {
    const response = event.response as Record<string, unknown> | undefined;
    if (this.responseId === null && typeof response?.id === 'string') {
      this.responseId = response.id;
      this.records.push(this.owner(response.id));
    }
    if (this.responseId !== null) {
      const done = event.type === 'response.output_item.done' ? itemIdsOf([event.item]) : TERMINAL.has(event.type as string) ? itemIdsOf(response?.output) : [];
      const fresh = done.filter((id) => !this.owned.has(id));
      if (fresh.length) {
        for (const id of fresh) this.owned.add(id);
        this.records.push(this.owner('', fresh));
      }
    }
    if (!this.calls.active) return;
    if (event.type === 'response.output_item.added' || event.type === 'response.output_item.done') {
      this.calls.item(event.item, typeof event.output_index === 'number' ? event.output_index : -1);
    }
    if (typeof event.type === 'string' && TERMINAL.has(event.type)) this.calls.output(response?.output);
  }
}

/** How a Responses stream is read: typed events, `response.completed` (or a failure) ends it with the usage. */
function responseEvents(model: Model, redact: Redact, observe?: (event: Record<string, unknown>) => void): EventHandler {
  const renames = model.upstreamModel !== model.id;
  let usage: Usage | null = null;
  const produced = new ResponsesOutput();
  let done = false;
  let failed = false;
  let answered = false;
  let sequence = 0;
  return {
    event(data) {
      if (data === '[DONE]') return null;
      const event = parseEvent(data);
      observe?.(event);
      const type = typeof event.type === 'string' ? event.type : 'message';
      if (typeof event.sequence_number === 'number') sequence = event.sequence_number + 1;
      if (type === 'error' || event.error) {
        throw errors.upstreamFailedMidStream(event.error ?? event);
      }
      produced.add(event);
      if (type === 'response.output_text.done') answered = true;
      const response = event.response as Record<string, unknown> | undefined;
      if (TERMINAL.has(type)) {
        done = true;
        failed = type === 'response.failed';
        usage = usageOf(response?.usage, 'input_tokens', 'output_tokens');
      }
      // A failed answer's error is the upstream's words: no upstream key material in it.
      const error = response?.error ? redactedDeep(response.error, redact) : response?.error;
      // The client sees the model it called, not the upstream's name for it.
      const renamed = renames && response && typeof response.model === 'string';
      const payload =
        renamed || error !== response?.error
          ? JSON.stringify({ ...event, response: { ...response, ...(renamed ? { model: model.id } : {}), error } })
          : data;
      return `event: ${type}\ndata: ${payload}\n\n`;
    },
    complete: () => done,
    answered: () => answered,
    usageInLastEvent: true,
    // Usage comes only with the terminal event, after all the output: no report precedes output.
    account: {
      get usage() {
        return usage;
      },
      output: () => produced.total(),
      failed: () => failed,
    },
    endFrame: null,
    // Responses' own error event, carrying the gateway's envelope (`error`) as well, so SDKs
    // that look for either raise it.
    errorFrame: (err) =>
      `event: error\ndata: ${JSON.stringify({ type: 'error', code: err.code, message: err.message, param: err.param, sequence_number: sequence, ...err.toJSON() })}\n\n`,
  };
}
