/**
 * POST /completions (legacy text completions), plain and streamed. `prompt` is a string, an
 * array of strings, an array of token ids or an array of token-id arrays. Billed like chat:
 * the hold is the prompt's worst case plus `max_tokens` (else the model's `maxOutputTokens`)
 * times the completions generated (the larger of `n` and `best_of`), the debit the upstream's
 * usage, else the produced `text` counted with the tokenizer.
 */
import { completionsFormat } from '../cache/openai-formats.js';
import { z } from 'zod';
import { usageFrom } from '../billing/usage.js';
import { ChatAccount, chatAnswer } from '../upstream/answers/chat.js';
import type { Model } from '../catalog/catalog.js';
import { errors } from '../errors.js';
import { type EventHandler, eventReader, parseEvent } from '../upstream/stream/reader.js';
import { DONE_FRAME, frameEvent } from '../upstream/stream/sse.js';
import { capWithin, checkContextWindow, checkOutputCap, refuseContextFields, textModel, zodError } from './shared.js';
import { bodyHold, textOperation } from './text.js';
import type { TextPlan } from './types.js';

const tokenId = z.int().min(0);

const completionsSchema = z.looseObject({
  model: z.string().min(1),
  prompt: z.union([
    z.string(),
    z.array(z.string()).min(1),
    z.array(tokenId).min(1),
    z.array(z.array(tokenId).min(1)).min(1),
  ]),
  max_tokens: z.int().positive().nullable().optional(),
  n: z.int().min(1).max(128).nullable().optional(),
  best_of: z.int().min(1).max(128).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  suffix: z.string().nullable().optional(),
  echo: z.boolean().nullable().optional(),
  stop: z.union([z.string(), z.array(z.string())]).nullable().optional(),
  temperature: z.number().nullable().optional(),
  top_p: z.number().nullable().optional(),
  seed: z.int().nullable().optional(),
});

/** The prompts of a body a plugin or guardrail replaced, or null when they are not in a shape the API takes. */
function sentPrompts(prompt: unknown): Array<string | number[]> | null {
  const checked = completionsSchema.shape.prompt.safeParse(prompt);
  return checked.success ? promptsOf(checked.data) : null;
}

/** Each prompt of the request (every one is completed on its own). */
function promptsOf(prompt: z.infer<typeof completionsSchema>['prompt']): Array<string | number[]> {
  if (typeof prompt === 'string') return [prompt];
  if (prompt.length > 0 && typeof prompt[0] === 'number') return [prompt as number[]];
  return prompt as Array<string | number[]>;
}

export const createCompletion = textOperation({
  path: '/completions',
  cache: completionsFormat,
  async plan(core, ctx, body) {
    const checked = completionsSchema.safeParse(body);
    if (!checked.success) throw zodError(checked.error, body);
    const req = checked.data;
    refuseContextFields(body, 'legacy completions');
    const model = await textModel(core, ctx, body, req.model);
    checkOutputCap(model, { max_tokens: req.max_tokens });

    const prompts = promptsOf(req.prompt);
    const utf8 = (t: string) => Buffer.byteLength(t, 'utf8');
    const countOne = (p: string | number[]) => (typeof p === 'string' ? core.tokenizer.count(p) : p.length);
    // The suffix is read by the model as part of its prompt.
    const suffix = req.suffix ? req.suffix : '';
    const tokensOf = (p: string | number[]) => countOne(p) + (suffix ? core.tokenizer.count(suffix) : 0);
    let bound = 0;
    let widest = 0;
    for (const p of prompts) {
      const b = (typeof p === 'string' ? utf8(p) : p.length) + utf8(suffix);
      checkContextWindow(model, b, () => tokensOf(p), 'prompt');
      bound += b;
      widest = Math.max(widest, b);
    }
    let counted: number | undefined;
    const promptTokens = () => (counted ??= prompts.reduce((n, p) => n + tokensOf(p), 0));
    // Each prompt is completed on its own, in its own context window: the cap sent (one for
    // all) is the one the longest prompt leaves room for.
    const longest = () => Math.max(...prompts.map(tokensOf));
    const choicesPerPrompt = Math.max(req.n ?? 1, req.best_of ?? 1);
    const maxOutput = (req.max_tokens ?? model.maxOutputTokens) * choicesPerPrompt * prompts.length;
    let estimate: number | undefined;
    const stream = req.stream === true;
    const clientWantsUsage = req.stream_options?.include_usage === true;
    /**
     * How the answer to `sent` (its prompts) is read. With `echo`, each choice's text starts with
     * the prompt the upstream was sent: a fresh Echo per answer read (a retried call's answer
     * starts over); `n` choices per prompt.
     */
    const readers = (sent: ReadonlyArray<string | number[]>): Pick<TextPlan, 'events' | 'answer'> => {
      const echoes = () => (req.echo === true ? new Echo(sent, req.n ?? 1) : null);
      return {
        events: (served, apiKey) => eventReader(completionEvents(served, clientWantsUsage, echoes()), apiKey),
        answer(answer) {
          if (!Array.isArray(answer.choices)) throw new Error('no choices');
          const echo = echoes();
          const read = chatAnswer(echo ? { ...answer, choices: answer.choices.map((c: unknown, i) => echo.strip(c, i, true)) } : answer);
          return { usage: read.usage, output: read.output };
        },
      };
    };
    return {
      model,
      hold: { bound, estimate: () => (estimate ??= Math.ceil(promptTokens() * 1.05)), maxOutput, outputs: choicesPerPrompt * prompts.length },
      stream,
      promptTokens,
      // A plugin's body may ask for more choices or output than the client's: held at the larger.
      holdFor: (fields) => {
        const asked = outputAsked(fields, model.maxOutputTokens);
        return bodyHold(core, fields, Math.max(maxOutput, asked.tokens), Math.max(choicesPerPrompt * prompts.length, asked.outputs));
      },
      unchanged: !stream,
      // No cap asked for: the upstream gets the model's, which is what was held per choice.
      cap: req.max_tokens
          ? { field: 'max_tokens', tokens: req.max_tokens, names: ['max_tokens'], sent: true }
          : { field: 'max_tokens', tokens: capWithin(model, model.maxOutputTokens, widest, longest), names: ['max_tokens'], sent: false },
      fields(served) {
        const out: Record<string, unknown> = { ...body, model: served.upstreamModel };
        if (stream) out.stream_options = { ...(req.stream_options ?? {}), include_usage: true };
        return out;
      },
      ...readers(prompts),
      // A prompt a plugin or guardrail rewrote (a redaction) is what the upstream echoes.
      readsFor: (fields) => readers(sentPrompts(fields.prompt) ?? prompts),
    };
  },
});

/**
 * With `echo`, each choice's text starts with its prompt, which is not output: counted (when the
 * upstream reports no usage) it would bill the prompt again at the completion price. The echo
 * is taken off the front of each choice's text, a stream's as its text arrives. A prompt given
 * as tokens cannot be matched in text: its choices are counted whole.
 */
class Echo {
  /** Per choice index: the echo still expected at the front of its text, and the text taken off so far. */
  private readonly left = new Map<number, { echo: string; taken: string }>();

  constructor(
    private readonly prompts: ReadonlyArray<string | number[]>,
    private readonly perPrompt: number,
  ) {}

  /**
   * `choice` (at position `at` in its list) with the echo its text starts with taken off. A
   * text is taken off only once the whole prompt has come: text that stops short of it (the
   * choice ends first) or differs from it is output after all, and is counted, all of it.
   * `whole`: the choice's text is complete here (a plain answer).
   */
  strip(choice: unknown, at: number, whole = false): unknown {
    const c = choice as { index?: unknown; text?: unknown; finish_reason?: unknown } | null;
    if (!c || typeof c.text !== 'string') return choice;
    const index = typeof c.index === 'number' ? c.index : at;
    let state = this.left.get(index);
    if (!state) {
      const prompt = this.prompts[Math.floor(index / this.perPrompt)];
      this.left.set(index, (state = { echo: typeof prompt === 'string' ? prompt : '', taken: '' }));
    }
    const { echo, taken } = state;
    if (echo === '') return choice;
    const text = c.text;
    let i = 0;
    while (i < text.length && i < echo.length && text.charCodeAt(i) === echo.charCodeAt(i)) i++;
    if (i === echo.length) {
      // The echo ends here: what follows it is output.
      state.echo = '';
      state.taken = '';
      return { ...c, text: text.slice(i) };
    }
    const ends = whole || typeof c.finish_reason === 'string';
    if (i === text.length && !ends) {
      // All of it may be echo: held back until the rest of the prompt comes (or does not).
      state.echo = echo.slice(i);
      state.taken = taken + text;
      return { ...c, text: '' };
    }
    // No echo after all: what was held back is output, with this text.
    state.echo = '';
    state.taken = '';
    return { ...c, text: taken + text };
  }
}

/** How a legacy completions stream is read: chunks with `choices[].text`, the usage chunk, `[DONE]`. */
function completionEvents(model: Model, clientWantsUsage: boolean, echo: Echo | null): EventHandler {
  const renames = model.upstreamModel !== model.id;
  // Completions chunks are chat's with `text` in their choices: the chat reader reads them.
  const read = new ChatAccount();
  let done = false;
  return {
    event(data) {
      if (data === '[DONE]') {
        done = true;
        return null;
      }
      const chunk = parseEvent(data);
      if (chunk.error) {
        throw errors.upstreamFailedMidStream(chunk.error);
      }
      const u = usageFrom(chunk.usage);
      const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
      read.read(echo && choices.length ? { ...chunk, choices: choices.map((c: unknown, i) => echo.strip(c, i)) } : chunk);
      // The usage-only chunk was asked for by the gateway, not the client: kept to ourselves.
      if (u && choices.length === 0 && !clientWantsUsage) return null;
      // Like plain answers: the client sees the model it called, not the upstream's name for it.
      if (renames && typeof chunk.model === 'string') return frameEvent(JSON.stringify({ ...chunk, model: model.id }));
      return frameEvent(data);
    },
    complete: () => done,
    answered: () => read.answered(),
    account: read,
    endFrame: DONE_FRAME,
    errorFrame: (err) => frameEvent(JSON.stringify({ ...err.toJSON(), choices: [{ index: 0, text: '', finish_reason: 'error' }] })) + DONE_FRAME,
  };
}

/** The most output a completions body asks for (its cap, else the model's, per choice, per prompt), and how many outputs share it. */
function outputAsked(fields: Record<string, unknown>, modelMax: number): { tokens: number; outputs: number } {
  const count = (v: unknown) => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : 0);
  const prompts = Array.isArray(fields.prompt) && fields.prompt.length > 0 && typeof fields.prompt[0] !== 'number' ? fields.prompt.length : 1;
  const outputs = Math.max(count(fields.n) || 1, count(fields.best_of) || 1) * prompts;
  return { tokens: (count(fields.max_tokens) || modelMax) * outputs, outputs };
}
