/**
 * The output guardrails of one call: the configured `pii` and `regex` guardrails that run on
 * the answer (`on` has "output") and cover the call's account and model, the plugins' onOutput
 * hooks, and the output moderation of a plain answer. A call none of them covers gets no
 * guard at all (its stream keeps the relay's byte fast path untouched).
 */
import type { Model } from '../catalog/catalog.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import { type Hooks, PluginHookError, modelCallHookArgs } from '../pipeline/hooks.js';
import type { RequestContext } from '../pipeline/types.js';
import type { EventReader } from '../upstream/stream/reader.js';
import { acted, type BlockLog } from './acted.js';
import type { Guardrail } from './guardrail.js';
import { answerTexts, findersCheck, guardAnswer, type TextCheck } from './output-plain.js';
import { guardedEvents, type OnAct, type OutputFormat } from './output-stream.js';
import type { OutputFinder } from './scanner.js';

/** The API of a token-priced path whose answer carries text, or null (embeddings). */
export function outputFormat(path: string): OutputFormat | null {
  if (path === '/chat/completions') return 'chat';
  if (path === '/completions') return 'completions';
  if (path === '/responses') return 'responses';
  if (path === '/messages') return 'messages';
  return null;
}

export interface OutputGuard {
  /**
   * Throws the 400 of a stream these guardrails cannot guard (an output moderation judges a
   * whole answer): checked before the input guardrails, whose checks may cost.
   */
  refuseStream(): void;
  /**
   * Readies a stream's guard (a plugin's onOutput runs here, before any model call): it wraps
   * the stream's reader, whose frames then go through the output guardrails.
   */
  stream(): Promise<(reader: EventReader) => EventReader>;
  /** A plain answer's JSON as the client gets it, or null when unchanged; 503 when a guardrail could not answer. */
  answer(text: string): Promise<string | null>;
  /**
   * Places the holds of the checks a plain answer will get (an output moderation's), before
   * the model's answer is paid for: 402 when they do not fit, so an answer paid for is never
   * withheld for want of money for its check.
   */
  prepare(): Promise<void>;
  /** Gives back the holds of checks not made (the call failed before its answer was judged). */
  release(): Promise<void>;
}

/** The output moderation of a plain answer: its checks held ahead, then made on the answer's texts. */
export interface OutputModeration {
  reserve(): Promise<void>;
  /** By the first that flags the texts (its holds placed first if they were not). */
  check(texts: string[]): Promise<{ id: string; flagged: boolean } | null>;
  release(): Promise<void>;
}

export interface OutputDeps {
  guardrails: readonly Guardrail[];
  hooks: Hooks;
  log: Logger;
  blocks: BlockLog;
  /** The output moderation covering a call, when any does. */
  moderation?: (ctx: RequestContext, model: Model) => OutputModeration | null;
}

export function outputGuard(deps: OutputDeps, ctx: RequestContext, model: Model, path: string): OutputGuard | null {
  const format = outputFormat(path);
  if (!format) return null;
  const finders: OutputFinder[] = [];
  for (const g of deps.guardrails) {
    if (!g.covers(ctx.key.accountId, model.id)) continue;
    for (const f of g.finders) finders.push({ ...f, guardrail: g.id, block: g.action === 'block' });
  }
  const plugins = deps.hooks.has('onOutput');
  const moderation = deps.moderation?.(ctx, model) ?? null;
  if (finders.length === 0 && !plugins && !moderation) return null;
  const where = { on: 'output' as const, model: model.id, path, blocks: deps.blocks };
  const onAct: OnAct = (id, action) => acted(ctx, id, action, where);
  const refuseStream = () => {
    // A moderation judges a whole text: a stream cannot be held back whole for it, and an
    // answer it has not judged is never let by. The client asks without `stream`.
    if (moderation) {
      throw new GatewayError('invalid_request', 'An output moderation guardrail covers this call: its answer cannot be streamed. Ask without "stream".', {
        param: 'stream',
      });
    }
  };
  return {
    prepare: () => moderation?.reserve() ?? Promise.resolve(),
    release: () => moderation?.release() ?? Promise.resolve(),
    refuseStream,
    async stream() {
      refuseStream();
      const plugin = plugins ? await pluginOutput(deps, ctx, model, path, [], true, onAct) : null;
      return (reader) => guardedEvents(reader, format, finders, onAct, plugin?.rewrite, plugin?.blocked ?? null);
    },
    async answer(text) {
      const answer = JSON.parse(text) as Record<string, unknown>;
      // What the plugins and the moderation judge: the answer's texts as it came, read once.
      const texts = plugins || moderation ? answerTexts(format, answer) : [];
      const checks: TextCheck[] = [];
      if (finders.length) checks.push(findersCheck(finders, onAct));
      if (plugins) {
        const plugin = await pluginOutput(deps, ctx, model, path, texts, false, onAct);
        if (plugin.blocked !== null) checks.push(() => ({ text: '', blocked: true }));
        else if (plugin.rewrite) checks.push((t) => ({ text: plugin.rewrite!(t), blocked: false }));
      }
      if (moderation) {
        let verdict: Awaited<ReturnType<OutputModeration['check']>>;
        try {
          verdict = await moderation.check(texts);
        } catch (err) {
          const id = err instanceof GatewayError && typeof err.metadata?.guardrail === 'string' ? err.metadata.guardrail : null;
          if (id) acted(ctx, id, 'unavailable', where);
          throw err;
        }
        if (verdict?.flagged) {
          onAct(verdict.id, 'block');
          checks.push(() => ({ text: '', blocked: true }));
        }
      }
      const check: TextCheck = (t) => {
        let out = t;
        for (const c of checks) {
          const r = c(out);
          if (r.blocked) return r;
          out = r.text;
        }
        return { text: out, blocked: false };
      };
      const rewritten = guardAnswer(format, answer, check);
      return rewritten ? JSON.stringify(rewritten) : null;
    },
  };
}

/** The plugins' onOutput hooks: the rewrites they registered (in order) and the first block. */
async function pluginOutput(
  deps: OutputDeps,
  ctx: RequestContext,
  model: Model,
  path: string,
  texts: string[],
  stream: boolean,
  onAct: OnAct,
): Promise<{ rewrite: ((text: string) => string) | null; blocked: string | null }> {
  const rewrites: Array<[string, (text: string) => string]> = [];
  let blocked: string | null = null;
  try {
    await deps.hooks.runStrict('onOutput', {
      ...modelCallHookArgs(ctx, model, path),
      stream,
      texts,
      redact(guardrail, rewrite) {
        rewrites.push([String(guardrail), rewrite]);
      },
      block(guardrail) {
        blocked ??= String(guardrail);
      },
    });
  } catch (err) {
    if (!(err instanceof PluginHookError)) throw err;
    acted(ctx, err.plugin, 'unavailable', { on: 'output', model: model.id, path, blocks: deps.blocks });
    deps.log.error({ msg: 'plugin hook onOutput threw; the answer is withheld', plugin: err.plugin, requestId: ctx.requestId, err: (err.cause as Error)?.message ?? String(err.cause) });
    throw new GatewayError('guardrail_unavailable', `The guardrail of plugin ${err.plugin} could not check the answer; it was withheld.`, {
      metadata: { guardrail: err.plugin },
      cause: err,
    });
  }
  if (blocked !== null) onAct(blocked, 'block');
  if (rewrites.length === 0) return { rewrite: null, blocked };
  const named = new Set<string>();
  return {
    blocked,
    rewrite: (text) => {
      let out = text;
      for (const [id, rewrite] of rewrites) {
        let next: string;
        try {
          next = rewrite(out);
          if (typeof next !== 'string') throw new TypeError(`the rewrite returned ${next === null ? 'null' : typeof next}, not text`);
        } catch (err) {
          // The plugin's fault, not the upstream's: the answer is withheld as when its hook
          // throws (503 guardrail_unavailable), and the upstream's circuit is left alone.
          acted(ctx, id, 'unavailable', { on: 'output', model: model.id, path, blocks: deps.blocks });
          deps.log.error({ msg: 'a plugin output rewrite threw; the answer is withheld', guardrail: id, requestId: ctx.requestId, err: err instanceof Error ? err.message : String(err) });
          throw new GatewayError('guardrail_unavailable', `The guardrail "${id}" could not check the answer; it was withheld.`, { metadata: { guardrail: id }, cause: err });
        }
        if (next !== out && !named.has(id)) {
          named.add(id);
          onAct(id, 'redact');
        }
        out = next;
      }
      return out;
    },
  };
}
