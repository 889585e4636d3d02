/**
 * POST /chat/completions, declared: the request's schema, its worst case (the prompt with the
 * brand and knowledge injected, tools and functions, image and audio parts, and the most
 * output n choices may produce), what goes upstream, and how its answer and events are read.
 */
import { z } from 'zod';
import { choicesOutput } from '../billing/output.js';
import { chatFormat } from '../cache/openai-formats.js';
import { countPromptTokens, estimatePromptTokens, type PromptInput, promptTokensBound } from '../billing/tokens.js';
import { usageFrom } from '../billing/usage.js';
import { GatewayError } from '../errors.js';
import { CONTEXT_FIELDS } from '../context/inject.js';
import { withoutFields } from '../http/objects.js';
import { createChatEvents } from '../upstream/stream/chat-events.js';
import type { Model } from '../catalog/catalog.js';
import type { ApiKeyRecord } from '../stores/types.js';
import { overReader, type EventReader } from '../upstream/stream/reader.js';
import { hostedToolsHold, unsupportedTool, withToolCalls } from './hosted-tools.js';
import { checkItemOwner, keepResponseOwner } from './response-owners.js';
import { capWithin, checkContextWindow, checkOutputCap, textModel, zodError } from './shared.js';
import { promptHold, textOperation } from './text.js';
import { contextLengthHold, uncountableChatInput } from './uncountable.js';

const part = z.looseObject({ type: z.string() });
const message = z.looseObject({
  role: z.enum(['system', 'user', 'assistant', 'tool', 'developer']),
  content: z.union([z.string(), z.array(part), z.null()]).optional(),
});

export const chatSchema = z.looseObject({
  model: z.string().min(1),
  messages: z.array(message).min(1),
  stream: z.boolean().nullable().optional(),
  temperature: z.number().nullable().optional(),
  top_p: z.number().nullable().optional(),
  max_tokens: z.int().positive().nullable().optional(),
  max_completion_tokens: z.int().positive().nullable().optional(),
  n: z.int().min(1).max(128).nullable().optional(),
  stop: z.union([z.string(), z.array(z.string())]).nullable().optional(),
  response_format: z.looseObject({}).nullable().optional(),
  tools: z.array(z.unknown()).nullable().optional(),
  tool_choice: z.union([z.string(), z.looseObject({})]).nullable().optional(),
  functions: z.array(z.unknown()).nullable().optional(),
  function_call: z.union([z.string(), z.looseObject({})]).nullable().optional(),
  seed: z.int().nullable().optional(),
  reasoning_effort: z.enum(['low', 'medium', 'high']).optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  brand: z.string().min(1).optional(),
  knowledge: z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(10)]).optional(),
});

export type ChatBody = z.infer<typeof chatSchema>;

/** The fields a chat request caps its output with (an upstream may honour either). */
const CHAT_CAPS = ['max_tokens', 'max_completion_tokens'] as const;

const ROLES = new Set(['system', 'user', 'assistant', 'tool', 'developer']);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isPositiveInt = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v > 0;

/**
 * Whether `body` is a chat request of the everyday shape that `chatSchema` surely accepts:
 * a model, messages with a known role and string, null or typed-part content, and of the
 * optional fields only the ones checked here (stream, max_tokens, temperature, stream_options).
 * It answers in a fraction of zod's time; false means "not sure", and zod then decides (and
 * words the 400), so it may never accept what the schema refuses (a property test holds it to that).
 */
export function isEverydayChat(body: Record<string, unknown>): boolean {
  if (typeof body.model !== 'string' || body.model.length === 0) return false;
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) return false;
  for (const m of messages) {
    if (!isObject(m) || typeof m.role !== 'string' || !ROLES.has(m.role)) return false;
    const content = m.content;
    if (content === undefined || content === null || typeof content === 'string') continue;
    if (!Array.isArray(content)) return false;
    for (const part of content) if (!isObject(part) || typeof part.type !== 'string') return false;
  }
  for (const k in body) {
    const v = body[k];
    switch (k) {
      case 'model':
      case 'messages':
        break;
      case 'stream':
        if (v !== null && typeof v !== 'boolean') return false;
        break;
      case 'max_tokens':
        if (v !== null && !isPositiveInt(v)) return false;
        break;
      case 'temperature':
        // JSON.parse reads 1e400 as Infinity, which the schema refuses.
        if (v !== null && !(typeof v === 'number' && Number.isFinite(v))) return false;
        break;
      case 'stream_options':
        if (v !== null && !(isObject(v) && (v.include_usage === undefined || typeof v.include_usage === 'boolean'))) return false;
        break;
      default:
        // Any other field the schema knows goes to zod; one it does not know passes, as in the schema.
        if (Object.hasOwn(chatSchema.shape, k)) return false;
    }
  }
  return true;
}

/**
 * The hosted tools of a chat request, held and billed: chat completions reports no per-call
 * count of a hosted tool, so one in `tools` (anything but `function` / `custom`) is refused even
 * when priced. `web_search_options` asks a search model for one search per request: relayed only
 * when the model prices `web_search`, and billed as one call.
 */
function chatHostedTools(model: Model, key: ApiKeyRecord, tools: readonly unknown[] | null | undefined, search: unknown) {
  for (const tool of tools ?? []) {
    const type = tool && typeof tool === 'object' ? (tool as { type?: unknown }).type : undefined;
    if (type !== 'function' && type !== 'custom') {
      throw unsupportedTool(typeof type === 'string' ? type : null, 'on chat completions, which reports no count of its calls to bill');
    }
  }
  if (search === undefined || search === null) return undefined;
  if (model.toolPrices?.get('web_search') === undefined) {
    throw unsupportedTool('web_search', `by the model \`${model.id}\` through this gateway`, 'web_search_options');
  }
  return hostedToolsHold(model, key, [{ type: 'web_search' }], 1);
}

export const chatCompletions = textOperation({
  path: '/chat/completions',
  cache: chatFormat,
  async plan(core, ctx, body) {
    if (!isEverydayChat(body)) {
      const checked = chatSchema.safeParse(body);
      if (!checked.success) throw zodError(checked.error, body);
    }
    const req = body as ChatBody;
    const model = await textModel(core, ctx, body, req.model);
    checkOutputCap(model, { max_tokens: req.max_tokens, max_completion_tokens: req.max_completion_tokens });
    if (ctx.key.kind === 'agent') refuseMediaOutput(body);
    // An earlier answer's audio given back by id is resolved by the upstream under the
    // operator's key: only the account that was given it may (404 for any other, before the hold).
    const audioIds = audioGivenBack(req.messages);
    if (audioIds.length) await checkItemOwner(core, audioIds, ctx.key.accountId, 'messages');
    const injected = await core.context.apply(ctx.key.accountId, req, req.messages);
    const messages = injected?.length ? [...injected, ...req.messages] : req.messages;

    // The most output the call may produce: the larger of the two caps a client may send (an
    // upstream may honour either), else the model's own, for each of the n choices.
    const perChoice = Math.max(req.max_tokens ?? 0, req.max_completion_tokens ?? 0) || model.maxOutputTokens;
    const maxOutput = perChoice * (req.n ?? 1);
    // Everything a provider bills as prompt: messages, tool and function definitions, the tool
    // or function choice, and image and audio parts at the model's per-part maximum.
    const input: PromptInput = {
      messages,
      extras: [req.tools, req.functions, req.tool_choice, req.function_call],
      parts: { image: model.maxTokensPerImage, audio: model.maxTokensPerAudio },
    };
    const tools = chatHostedTools(model, ctx.key, req.tools, body.web_search_options);
    let estimate: number | undefined;
    const promptTokens = () => (estimate ??= estimatePromptTokens(core.tokenizer, input));
    // The hold is first placed on a byte bound of the prompt (no tokenizer on the hot path).
    // The injected brand and knowledge count too: they are part of what the model must read.
    const bound = promptTokensBound(input);
    checkContextWindow(model, bound, () => countPromptTokens(core.tokenizer, input), 'messages');

    const stream = req.stream === true;
    // A stream must ask the upstream for its usage chunk (the bill comes from it); a client that
    // asked for it already needs no rewrite of its body.
    const clientWantsUsage = req.stream_options?.include_usage === true;
    const addsUsage = stream && !clientWantsUsage;
    const counted = { bound, estimate: promptTokens, maxOutput, tools, outputs: req.n ?? 1 };
    return {
      model,
      // A part the gateway cannot count (unknown type, a file by id) may cost the whole context.
      hold: uncountableChatInput(messages) ? contextLengthHold(model, counted) : counted,
      holdFor(fields) {
        const replaced: PromptInput = {
          messages: Array.isArray(fields.messages) ? fields.messages : [],
          extras: [fields.tools, fields.functions, fields.tool_choice, fields.function_call],
          parts: input.parts,
        };
        const count = (v: unknown) => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : 0);
        const per = Math.max(count(fields.max_tokens), count(fields.max_completion_tokens)) || model.maxOutputTokens;
        const outputs = Math.max(req.n ?? 1, count(fields.n) || 1);
        const hold = { ...promptHold(core, replaced, Math.max(maxOutput, per * (count(fields.n) || 1))), tools, outputs };
        return uncountableChatInput(replaced.messages) ? contextLengthHold(model, hold) : hold;
      },
      stream,
      promptTokens,
      // A client that sent no stream_options gets the gateway's ahead of its own bytes; one that
      // sent some without include_usage has them merged, re-encoded.
      unchanged: !(addsUsage && 'stream_options' in req) && !injected && !('brand' in req) && !('knowledge' in req),
      ...(addsUsage ? { leading: '"stream_options":{"include_usage":true},' } : {}),
      // No cap asked for: the upstream gets the model's, which is what was held per choice.
      cap: req.max_tokens || req.max_completion_tokens
          ? { field: 'max_completion_tokens', tokens: perChoice, names: CHAT_CAPS, sent: true }
          : { field: 'max_completion_tokens', tokens: capWithin(model, perChoice, bound, promptTokens), names: CHAT_CAPS, sent: false },
      fields(served) {
        // The gateway's own fields (brand, knowledge) never go upstream.
        const out = withoutFields(body, CONTEXT_FIELDS);
        out.model = served.upstreamModel;
        out.messages = messages;
        if (stream) out.stream_options = { ...(req.stream_options ?? {}), include_usage: true };
        return out;
      },
      events(served, apiKey) {
        const reader = createChatEvents({ model: served, apiKey, clientWantsUsage, choices: req.n ?? 1 });
        const owned = asksForAudio(body) ? withAudioOwner(reader, req.n ?? 1, (ids) => keepResponseOwner(core, '', ctx.key.accountId, ctx.requestId, ids)) : reader;
        return tools ? withToolCalls(owned, () => tools) : owned;
      },
      answer(answer) {
        if (!Array.isArray(answer.choices)) throw new Error('no choices');
        const audio = audioOf(answer.choices, 'message');
        return {
          usage: usageFrom(answer.usage),
          output: () => choicesOutput(answer.choices),
          tools,
          ...(audio.length ? { remember: () => keepResponseOwner(core, '', ctx.key.accountId, ctx.requestId, audio) } : {}),
        };
      },
    };
  },
});

/** The ids of earlier answers' audio that assistant messages give back (`audio: { id }`). */
function audioGivenBack(messages: readonly unknown[]): string[] {
  let ids: string[] | null = null;
  for (const m of messages) {
    const audio = isObject(m) && m.role === 'assistant' ? m.audio : undefined;
    if (isObject(audio) && typeof audio.id === 'string') (ids ??= []).push(audio.id);
  }
  return ids ?? [];
}

/**
 * Agent keys never get media, whatever the endpoint: a chat request for spoken output (`audio`,
 * or `audio` in `modalities`) or images (`image` in `modalities`) is refused to them (403).
 */
function refuseMediaOutput(body: Record<string, unknown>): void {
  const refuse = (what: string, param: string) => new GatewayError('permission_denied', `Agent keys cannot ask for ${what}: it is media.`, { param });
  if (body.audio !== undefined && body.audio !== null) throw refuse('spoken output', 'audio');
  const media = Array.isArray(body.modalities) ? body.modalities.find((m) => m !== 'text') : undefined;
  if (media !== undefined) throw refuse(`the output modality ${JSON.stringify(media).slice(0, 100)}`, 'modalities');
}

/** Whether a chat body asks for spoken output (its `audio` settings, or `audio` in its modalities). */
const asksForAudio = (body: Record<string, unknown>): boolean =>
  (body.audio !== undefined && body.audio !== null) || (Array.isArray(body.modalities) && body.modalities.includes('audio'));

/** The audio ids in `choices` (each choice's `message` or, streamed, `delta`). */
function audioOf(choices: unknown, part: 'message' | 'delta'): string[] {
  if (!Array.isArray(choices)) return [];
  const ids: string[] = [];
  for (const c of choices) {
    const audio = isObject(c) && isObject(c[part]) ? (c[part] as Record<string, unknown>).audio : undefined;
    if (isObject(audio) && typeof audio.id === 'string' && audio.id) ids.push(audio.id);
  }
  return ids;
}

const AUDIO_KEY = Buffer.from('"audio"');

/**
 * A chat stream whose answer speaks: each audio id its chunks name is recorded for the account
 * as it comes, and a complete answer's last frames wait for the records (the id is given back
 * in the next request, which may reach another instance at once). Only such a stream is looked
 * at: the frames go out as they came.
 */
function withAudioOwner(reader: EventReader, choices: number, keep: (ids: string[]) => Promise<void>): EventReader {
  const seen = new Set<string>();
  const records: Promise<void>[] = [];
  return overReader(reader, {
    kept: () => Promise.all(records).then(() => {}),
    frames(frames) {
      // Each choice's audio has one id: once every choice's is seen, the rest (its base64) is not read.
      if (seen.size >= choices) return frames;
      for (const frame of frames) {
        const bytes = Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength);
        if (bytes.indexOf(AUDIO_KEY) === -1) continue;
        const fresh: string[] = [];
        for (const event of bytes.toString('utf8').split('\n\n')) {
          if (!event.startsWith('data: {') || !event.includes('"audio"')) continue;
          let chunk: unknown;
          try {
            chunk = JSON.parse(event.slice(6));
          } catch {
            continue;
          }
          for (const id of audioOf(isObject(chunk) ? chunk.choices : undefined, 'delta')) {
            if (seen.has(id)) continue;
            seen.add(id);
            fresh.push(id);
          }
        }
        if (fresh.length) records.push(keep(fresh));
      }
      return frames;
    },
  });
}
