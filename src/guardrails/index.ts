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
import { type Hooks, PluginHookError, pluginKey } from '../pipeline/hooks.js';
import type { RequestContext } from '../pipeline/types.js';
import { compileGuardrail, type Guardrail } from './guardrail.js';
import { mapPromptTexts, promptTexts, somePromptText } from './texts.js';

export type { Guardrail } from './guardrail.js';

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
}

type Rewrite = (fields: Record<string, unknown>) => Record<string, unknown>;

export function createGuardrails(configs: readonly GuardrailConfig[], hooks: Hooks, log: Logger): Guardrails {
  const all = configs.filter((c) => c.on.includes('input')).map(compileGuardrail);
  const plugins = hooks.has('onInput');
  return {
    any: all.length > 0 || plugins,
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
        if (g.action === 'redact') apply(g.id, (f) => mapPromptTexts(f, (t) => g.redact(t)));
        else if (somePromptText(out, (t) => g.finds(t))) {
          acted(ctx, g.id, 'block');
          throw contentFilter(g);
        }
      }
      if (plugins) await pluginGuardrails(hooks, log, ctx, model, path, () => out, apply);
      return { fields: out, redact: (f) => steps.reduce((acc, step) => step(acc), f) };
    },
  };
}

/** Names a guardrail that acted on the request's record: its access line, metrics and span. */
function acted(ctx: RequestContext, id: string, action: GuardrailAction['action']): void {
  const record = ctx.observed.record;
  (record.guardrails ??= []).push({ id, action });
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
): Promise<void> {
  let blocked: string | null = null;
  try {
    await hooks.runStrict('onInput', {
      request: ctx.request,
      requestId: ctx.requestId,
      key: pluginKey(ctx.key),
      model: { id: model.id, upstream: model.upstream, upstreamModel: model.upstreamModel },
      path,
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
    acted(ctx, blocked, 'block');
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
