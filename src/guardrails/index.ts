/**
 * Input guardrails: the configured checks, then the plugins' onInput hooks, run on the body the
 * upstream would receive (after brand, knowledge and the plugins' rewrites), before the hold is
 * placed. A `redact` guardrail replaces what it finds, and the hold is computed on the redacted
 * body; a `block` that finds anything refuses the call (400 content_filter) before any model
 * call, so nothing is billed. Guardrails run in order, each on the text the ones before it left.
 * A plugin guardrail that throws refuses the call (503 guardrail_unavailable): a check that
 * cannot answer never lets the prompt by.
 */
import type { Model } from '../catalog/catalog.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { GuardrailAction } from '../observability/record.js';
import type { GuardrailConfig } from '../options/guardrails.js';
import { type Hooks, PluginHookError, modelCallHookArgs } from '../pipeline/hooks.js';
import type { RequestContext } from '../pipeline/types.js';
import { acted as actedOn, BlockLog, type GuardrailBlock } from './acted.js';
import { compileGuardrail, type Guardrail } from './guardrail.js';
import { createModeration, type ModerationDeps, type ReservedCheck } from './moderation.js';
import { joinSplitTexts, mergeSplitTexts, someSplitText } from './split-texts.js';
import { type OutputGuard, outputGuard, type OutputModeration } from './output.js';
import { mapPromptTexts, promptTexts, somePromptText } from './texts.js';

export type { Guardrail } from './guardrail.js';
export type { GuardrailBlock } from './acted.js';
export type { OutputGuard } from './output.js';

/** What the guardrails made of a prompt. */
export interface CheckedInput {
  /** The fields to send: the same object when no guardrail changed anything. */
  fields: Record<string, unknown>;
  /** The same redactions applied to the fields of another target of the model (a fallback). */
  redact(fields: Record<string, unknown>): Record<string, unknown>;
}

export interface Guardrails {
  /** Whether any guardrail (configured, or a plugin's onInput) exists: none costs a call nothing. */
  readonly any: boolean;
  /** Runs the guardrails covering a call to `model` on its fields. Throws 400 content_filter on a block. */
  input(ctx: RequestContext, model: Model, path: string, fields: Record<string, unknown>): Promise<CheckedInput>;
  /** The output guardrails covering a call to `model` at `path`, or null when none does. */
  output(ctx: RequestContext, model: Model, path: string): OutputGuard | null;
  /** This instance's recent blocks, newest first (of `account` only when given). */
  recentBlocks(limit?: number, account?: string): GuardrailBlock[];
}

type Rewrite = (fields: Record<string, unknown>) => Record<string, unknown>;

/**
 * `gateway`: what a moderation check needs (the upstreams, the billing door), asked for at the
 * first check: the guardrails are built with the services that provide it.
 */
export function createGuardrails(configs: readonly GuardrailConfig[], hooks: Hooks, log: Logger, gateway: () => ModerationDeps): Guardrails {
  const blocks = new BlockLog();
  const found = configs.filter((c) => c.kind !== 'moderation');
  const all = found.filter((c) => c.on.includes('input')).map(compileGuardrail);
  const outputs = found.filter((c) => c.on.includes('output')).map(compileGuardrail);
  const moderations = configs.flatMap((c) => (c.kind === 'moderation' ? [createModeration(c)] : []));
  const inputModerations = moderations.filter((m) => m.on.includes('input'));
  const outputModerations = moderations.filter((m) => m.on.includes('output'));
  const plugins = hooks.has('onInput');
  const outputDeps = {
    guardrails: outputs,
    hooks,
    log,
    blocks,
    moderation: outputModerations.length ? (ctx: RequestContext, model: Model) => outputModeration(outputModerations, gateway, ctx, model) : undefined,
  };
  const anyOutput = outputs.length > 0 || hooks.has('onOutput') || outputModerations.length > 0;
  const acted = (ctx: RequestContext, id: string, action: GuardrailAction['action'], model?: Model, path?: string) =>
    actedOn(ctx, id, action, { on: 'input', model: model?.id ?? '', path: path ?? '', blocks });
  return {
    any: all.length > 0 || plugins || inputModerations.length > 0,
    output: (ctx, model, path) => (anyOutput ? outputGuard(outputDeps, ctx, model, path) : null),
    recentBlocks: (limit, account) => blocks.list(limit, account),
    async input(ctx, model, path, fields) {
      const steps: Rewrite[] = [];
      let out = fields;
      // A step that changed nothing is no action: only a guardrail that redacted is named.
      const apply = (id: string, step: Rewrite) => {
        const next = step(out);
        if (next === out) return;
        steps.push(step);
        out = next;
        acted(ctx, id, 'redact');
      };
      for (const g of all) {
        if (!g.covers(ctx.key.accountId, model.id)) continue;
        // Each text alone, then the texts a message splits over parts, read as the model reads
        // them (a run whose joined text still holds a match is made one part, redacted).
        if (g.action === 'redact') apply(g.id, (f) => mergeSplitTexts(mapPromptTexts(f, (t) => g.redact(t)), (texts) => (g.finds(texts.join('')) ? g.redact(texts.join('')) : null)));
        else if (somePromptText(out, (t) => g.finds(t)) || someSplitText(out, (t) => g.finds(t))) {
          acted(ctx, g.id, 'block', model, path);
          throw contentFilter(g);
        }
      }
      if (plugins) await pluginGuardrails(hooks, log, ctx, model, path, () => out, apply, acted);
      // Last, on what the others left (a redacted text is what the moderation upstream reads).
      for (const m of inputModerations) {
        if (!m.covers(ctx.key.accountId, model.id)) continue;
        let flagged: boolean;
        try {
          // A message's text parts joined, as the model reads them: each text is sent once.
          flagged = await m.flags(gateway(), ctx, promptTexts(joinSplitTexts(out)), 'input');
        } catch (err) {
          if (err instanceof GatewayError && err.code === 'guardrail_unavailable') acted(ctx, m.id, 'unavailable', model, path);
          throw err;
        }
        if (flagged) {
          acted(ctx, m.id, 'block', model, path);
          throw contentFilter(m);
        }
      }
      return { fields: out, redact: (f) => steps.reduce((acc, step) => step(acc), f) };
    },
  };
}

/**
 * The output moderations covering a call: a plain answer's check, by the first that flags it.
 * Their holds are placed ahead (`reserve`, before the model's answer is paid for); the checks
 * not made are given back.
 */
function outputModeration(moderations: ReturnType<typeof createModeration>[], gateway: () => ModerationDeps, ctx: RequestContext, model: Model): OutputModeration | null {
  const covering = moderations.filter((m) => m.covers(ctx.key.accountId, model.id));
  if (covering.length === 0) return null;
  let reserved: Array<{ id: string; check: ReservedCheck }> | null = null;
  const releaseAll = (list: Array<{ check: ReservedCheck }>) => Promise.all(list.map((r) => r.check.release())).then(() => undefined);
  const reserve = async () => {
    if (reserved) return;
    const placed: Array<{ id: string; check: ReservedCheck }> = [];
    try {
      for (const m of covering) placed.push({ id: m.id, check: await m.reserve(gateway(), ctx, 'output') });
    } catch (err) {
      // One does not fit (402): the others placed go back.
      await releaseAll(placed);
      throw err;
    }
    reserved = placed;
  };
  return {
    reserve,
    async check(texts) {
      await reserve();
      const list = reserved!;
      try {
        for (const r of list) if (await r.check.check(texts)) return { id: r.id, flagged: true };
        return null;
      } finally {
        await releaseAll(list);
      }
    },
    release: () => (reserved ? releaseAll(reserved) : Promise.resolve()),
  };
}

/** The plugins' onInput hooks: each sees the texts the ones before it left. */
async function pluginGuardrails(
  hooks: Hooks,
  log: Logger,
  ctx: RequestContext,
  model: Model,
  path: string,
  current: () => Record<string, unknown>,
  apply: (id: string, step: Rewrite) => void,
  acted: (ctx: RequestContext, id: string, action: GuardrailAction['action'], model?: Model, path?: string) => void,
): Promise<void> {
  let blocked: string | null = null;
  try {
    await hooks.runStrict('onInput', {
      ...modelCallHookArgs(ctx, model, path),
      get texts() {
        return promptTexts(current());
      },
      redact(guardrail, rewrite) {
        apply(String(guardrail), (f) => mapPromptTexts(f, rewrite));
      },
      block(guardrail) {
        blocked ??= String(guardrail);
      },
    });
  } catch (err) {
    if (!(err instanceof PluginHookError)) throw err;
    acted(ctx, err.plugin, 'unavailable');
    log.error({ msg: 'plugin hook onInput threw; the call is refused', plugin: err.plugin, requestId: ctx.requestId, err: (err.cause as Error)?.message ?? String(err.cause) });
    throw new GatewayError('guardrail_unavailable', `The guardrail of plugin ${err.plugin} could not check the request; it was not sent.`, {
      metadata: { guardrail: err.plugin },
      cause: err,
    });
  }
  if (blocked !== null) {
    acted(ctx, blocked, 'block', model, path);
    throw contentFilter({ id: blocked });
  }
}

/** The refusal of a prompt a guardrail blocked: it names the guardrail, never what it found. */
export function contentFilter(g: Pick<Guardrail, 'id'>): GatewayError {
  return new GatewayError('content_filter', `The request was blocked by the guardrail "${g.id}".`, { metadata: { guardrail: g.id } });
}

/**
 * A media request's fields and bytes once the guardrails ran on its prompt: the client's bytes
 * when nothing changed, else the redacted fields as JSON.
 */
export async function guardedBody(
  guardrails: Guardrails,
  ctx: RequestContext,
  model: Model,
  path: string,
  fields: Record<string, unknown>,
  bytes: Uint8Array,
): Promise<{ fields: Record<string, unknown>; bytes: Uint8Array }> {
  if (!guardrails.any) return { fields, bytes };
  const checked = await guardrails.input(ctx, model, path, fields);
  return checked.fields === fields ? { fields, bytes } : { fields: checked.fields, bytes: Buffer.from(JSON.stringify(checked.fields)) };
}
