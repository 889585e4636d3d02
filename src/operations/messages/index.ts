/**
 * POST /messages (Anthropic's Messages API) and POST /messages/count_tokens. A Messages call
 * is one more text operation over the one billed call: the hold is its prompt's worst case
 * (system, every block, tools; images at the model's per-image maximum; a document at the
 * whole context) plus `max_tokens`; the debit is the usage the upstream reports (the whole
 * input, cache reads and writes named), else the output counted with the tokenizer. `brand`
 * and `knowledge` go in front of `system`. Served by an OpenAI-kind upstream, the call goes as
 * chat and its answer comes back as a Message (upstream/kinds/messages).
 */
import { messagesFormat } from '../../cache/messages-format.js';
import { countPromptTokens, estimatePromptTokens, promptTokensBound } from '../../billing/tokens.js';
import { CONTEXT_FIELDS } from '../../context/inject.js';
import { json, parseJsonObject } from '../../http/json.js';
import { withoutFields } from '../../http/objects.js';
import { eventReader } from '../../upstream/stream/reader.js';
import { SERVER_TOOL, unsupportedTool } from '../hosted-tools.js';
import { checkContextWindow, checkOutputCap, pricedTier, textModel, zodError } from '../shared.js';
import { promptHold, textOperation } from '../text.js';
import type { Operation } from '../types.js';
import { contextLengthHold } from '../uncountable.js';
import { messagesAnswer } from '../../upstream/answers/messages.js';
import { messagesEvents } from './events.js';
import { hasDocument, messagesPrompt, systemWith } from './prompt.js';
import { countTokensSchema, messagesSchema, specificError } from './schema.js';

/**
 * Anthropic's server tools run on Anthropic's side at a price per use (searches, fetches,
 * container time) that no usage field reports to bill: refused, like chat's hosted tools. Its
 * client tools (`bash_...`, `text_editor_...`, `computer_...`) cost only tokens (SERVER_TOOL).
 */

/**
 * Fields that make Anthropic run billable work beside the tokens (remote MCP servers, a
 * code-execution container): refused for the same reason, never relayed unbilled.
 */
const SERVER_FIELDS = ['mcp_servers', 'container'] as const;

function refuseServerTools(body: Record<string, unknown>, tools: ReadonlyArray<{ type?: string | null | undefined }> | undefined): void {
  for (const field of SERVER_FIELDS) {
    if (body[field] !== undefined && body[field] !== null) throw unsupportedTool(field, 'on the Messages API through this gateway, which cannot bill its per-use price', field);
  }
  tools?.forEach((t, i) => {
    if (t.type && SERVER_TOOL.test(t.type)) throw unsupportedTool(t.type, 'on the Messages API through this gateway, which cannot bill its per-use price', `tools[${i}]`);
  });
}

export const createMessage = textOperation({
  path: '/messages',
  cache: messagesFormat,
  async plan(core, ctx, body) {
    const checked = messagesSchema.safeParse(body);
    if (!checked.success) throw zodError(specificError(checked.error), body);
    const req = checked.data;
    const model = pricedTier(await textModel(core, ctx, body, req.model), body, 'inference_geo');
    checkOutputCap(model, { max_tokens: req.max_tokens });
    refuseServerTools(body, req.tools);
    const injected = await core.context.apply(ctx.key.accountId, req, req.messages);
    const system = systemWith(req.system, injected);
    const input = messagesPrompt(model, { ...req, system });
    const bound = promptTokensBound(input);
    checkContextWindow(model, bound, () => countPromptTokens(core.tokenizer, input), 'messages');
    let estimate: number | undefined;
    const promptTokens = () => (estimate ??= estimatePromptTokens(core.tokenizer, input));
    const counted = { bound, estimate: promptTokens, maxOutput: req.max_tokens };
    return {
      model,
      hold: hasDocument(req.messages) ? contextLengthHold(model, counted) : counted,
      holdFor(fields) {
        const asked = typeof fields.max_tokens === 'number' ? fields.max_tokens : 0;
        const hold = promptHold(core, messagesPrompt(model, fields), Math.max(req.max_tokens, asked));
        return hasDocument(fields.messages) ? contextLengthHold(model, hold) : hold;
      },
      stream: req.stream === true,
      promptTokens,
      unchanged: !injected && !('brand' in body) && !('knowledge' in body),
      // Messages requires a cap: it goes back in if a plugin removed it (the hold is at it).
      cap: { field: 'max_tokens', tokens: req.max_tokens, names: ['max_tokens'], sent: true },
      fields(served) {
        // The gateway's own fields (brand, knowledge) never go upstream; their text is in `system`.
        const out = withoutFields(body, CONTEXT_FIELDS);
        out.model = served.upstreamModel;
        if (injected?.length) out.system = system;
        return out;
      },
      events: (served, apiKey) => eventReader(messagesEvents(served), apiKey),
      answer(answer) {
        if (answer.type !== 'message' || !Array.isArray(answer.content)) throw new Error('not a message');
        const read = messagesAnswer(answer);
        return { usage: read.usage, output: read.output };
      },
    };
  },
});

/** The input tokens a Messages request would be billed for, counted with the gateway's tokenizer; nothing is billed. */
export const countMessageTokens: Operation = {
  method: 'POST',
  path: '/messages/count_tokens',
  async run(core, ctx) {
    const body = parseJsonObject(await ctx.body());
    const checked = countTokensSchema.safeParse(body);
    if (!checked.success) throw zodError(specificError(checked.error), body);
    const req = checked.data;
    const model = await core.catalog.resolve(req.model, ctx.key, 'text', () => core.grants(ctx.key.accountId));
    // The brand and knowledge the Messages call would put in front of `system` count, as it bills them.
    const injected = await core.context.apply(ctx.key.accountId, req, req.messages);
    await core.tokenizer.ready;
    return json(200, { input_tokens: countPromptTokens(core.tokenizer, messagesPrompt(model, { ...req, system: systemWith(req.system, injected) })) });
  },
};
