/**
 * Plugins: behaviour a team adds to the gateway without forking it (a webhook per charge, a
 * rewritten request, a header, its own log line). A plugin is an object of optional hooks;
 * plugins run in the order given, each hook at its stage of the pipeline:
 *
 *   onRequest          first, for every request (before the IP throttle and auth); may answer
 *   onAuthenticated    once the key is known
 *   onUpstreamRequest  right before a body goes upstream (after brand and knowledge); may replace it
 *   onInput            then, an input guardrail of the plugin's own: may redact the prompt or block it
 *   onOutput           an output guardrail of the plugin's own: may redact the answer's text or block it
 *   onBilled           after every charge lands in the store, with its ledger entry
 *   onResponse         last, for every response (refusals and errors included)
 *   onError            for every error answered (and every stream that failed after its 200)
 *   onDispose          when the gateway is disposed, after calls in flight finished
 *
 * A hook that throws (or rejects) is logged and skipped: it never changes billing, and never
 * the response beyond what the hooks that succeeded did. The exceptions are onInput and
 * onOutput: a guardrail that cannot answer refuses the call, or withholds the answer (fails
 * closed), rather than let the text by.
 */
import type { Logger } from '../observability/log.js';
import type { ApiKeyRecord, KeyKind, LedgerEntry } from '../stores/types.js';

/** The calling key as plugins see it: never its digest, never the key itself. */
export interface PluginKey {
  id: string;
  account: string;
  kind: KeyKind;
  /** Agent keys: their one model. */
  model: string | null;
  label: string | null;
  /** Short non-secret display prefix, e.g. "sk-mg-Ab12". */
  prefix: string;
}

export interface OnRequestArgs {
  request: Request;
  requestId: string;
  /** Answers the request with `response` instead of the gateway (onResponse still runs). */
  setResponse(response: Response): void;
}

export interface OnAuthenticatedArgs {
  request: Request;
  requestId: string;
  key: PluginKey;
  /** The key's account id. */
  account: string;
}

export interface OnUpstreamRequestArgs {
  request: Request;
  requestId: string;
  key: PluginKey;
  /** The model the client called (its id in this gateway), and where it goes. */
  model: { id: string; upstream: string; upstreamModel: string };
  /** The upstream path, e.g. "/chat/completions". */
  path: string;
  /** The body about to be sent upstream (a copy: change it through `setBody`). */
  body: Record<string, unknown>;
  /**
   * Replaces the body sent upstream (a JSON object; copied as it is given, so changing it later
   * changes nothing). The call is still billed by what the upstream reports. On text calls,
   * what decides the price beyond tokens (whether it streams, its tier and region, web search,
   * background work, MCP servers, a container, hosted tools and their calls) may not change:
   * such a call is refused.
   */
  setBody(body: Record<string, unknown>): void;
}

/**
 * An input guardrail of a plugin's own, run with the configured ones: after the plugins'
 * onUpstreamRequest, before the hold. It sees the prompt's texts and may redact or block.
 */
export interface OnInputArgs {
  request: Request;
  requestId: string;
  key: PluginKey;
  /** The model the client called (its id in this gateway), and where it goes. */
  model: { id: string; upstream: string; upstreamModel: string };
  /** The upstream path, e.g. "/chat/completions". */
  path: string;
  /**
   * Every text of the prompt as it now stands (message contents and text parts, `system`,
   * `instructions`, `input`, `prompt`), redactions of the guardrails before this one applied.
   */
  readonly texts: readonly string[];
  /**
   * Rewrites every text of the prompt with `rewrite`, as guardrail `guardrail` (named in the
   * access line and metrics when it changed something). Pure and synchronous: it is applied
   * again to a fallback target's body.
   */
  redact(guardrail: string, rewrite: (text: string) => string): void;
  /** Refuses the call: 400 content_filter naming `guardrail`, no upstream call, nothing billed. */
  block(guardrail: string): void;
}

/**
 * An output guardrail of a plugin's own, run with the configured ones on the answer's text
 * before the client sees it; the same shape as onInput. On a plain answer `texts` are its
 * texts; on a stream the hook runs once before the first text (`texts` empty, `stream` true),
 * and the rewrites it registers apply to each piece of text as it is released (after the
 * configured guardrails held back what a match of theirs could span).
 */
export interface OnOutputArgs {
  request: Request;
  requestId: string;
  key: PluginKey;
  model: { id: string; upstream: string; upstreamModel: string };
  path: string;
  /** Whether the answer is streamed. */
  stream: boolean;
  /** Every text of the answer (message contents, output_text parts, text blocks); none on a stream. */
  readonly texts: readonly string[];
  /** Rewrites every text of the answer with `rewrite`, as guardrail `guardrail`. Pure and synchronous. */
  redact(guardrail: string, rewrite: (text: string) => string): void;
  /** Ends the answer as filtered (`finish_reason: "content_filter"` and its equivalents), its text withheld. */
  block(guardrail: string): void;
}

export interface OnBilledArgs {
  entry: LedgerEntry;
}

export interface OnResponseArgs {
  request: Request;
  requestId: string;
  /** The answer; its headers may be changed in place. */
  response: Response;
  /** Replaces the answer. */
  setResponse(response: Response): void;
}

export interface OnErrorArgs {
  error: unknown;
  requestId: string;
  /** The request's key, when the error came after it was authenticated. */
  key: PluginKey | null;
}

type MaybePromise = void | Promise<void>;

export interface GatewayPlugin {
  /** Named in the log line when one of its hooks throws. */
  name?: string;
  onRequest?(args: OnRequestArgs): MaybePromise;
  onAuthenticated?(args: OnAuthenticatedArgs): MaybePromise;
  onUpstreamRequest?(args: OnUpstreamRequestArgs): MaybePromise;
  /** A hook that throws refuses the call with 503 guardrail_unavailable (a guardrail fails closed). */
  onInput?(args: OnInputArgs): MaybePromise;
  /** A hook that throws withholds the answer with 503 guardrail_unavailable (a guardrail fails closed). */
  onOutput?(args: OnOutputArgs): MaybePromise;
  onBilled?(args: OnBilledArgs): MaybePromise;
  onResponse?(args: OnResponseArgs): MaybePromise;
  onError?(args: OnErrorArgs): MaybePromise;
  onDispose?(): MaybePromise;
}

type HookName = Exclude<keyof GatewayPlugin, 'name'>;
type HookArgs<H extends HookName> = Parameters<NonNullable<GatewayPlugin[H]>>;

/** Runs the plugins' hooks in order, each guarded. */
export interface Hooks {
  /** Whether any plugin has `hook` (callers skip building its arguments when none has). */
  has(hook: HookName): boolean;
  run<H extends HookName>(hook: H, ...args: HookArgs<H>): Promise<void>;
  /** Runs `hook` in order, unguarded: the first that throws stops the others and rejects (with the plugin's name). */
  runStrict<H extends HookName>(hook: H, ...args: HookArgs<H>): Promise<void>;
}

/** A plugin hook run with `runStrict` threw: which plugin, and what it threw. */
export class PluginHookError extends Error {
  override name = 'PluginHookError';
  constructor(
    readonly plugin: string,
    cause: unknown,
  ) {
    super(`plugin ${plugin} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

export function createHooks(plugins: readonly GatewayPlugin[], log: Logger): Hooks {
  const present = new Set<HookName>();
  for (const p of plugins) {
    for (const k of Object.keys(p) as (keyof GatewayPlugin)[]) if (k !== 'name' && typeof p[k] === 'function') present.add(k);
  }
  /** Runs `hook` of every plugin in order; `failed` decides what a throw does (skip, or refuse). */
  async function each(hook: HookName, args: unknown[], failed: (plugin: string, err: unknown) => void): Promise<void> {
    if (!present.has(hook)) return;
    for (const [i, p] of plugins.entries()) {
      const fn = p[hook] as ((...a: unknown[]) => MaybePromise) | undefined;
      if (!fn) continue;
      try {
        await fn.apply(p, args);
      } catch (err) {
        failed(p.name ?? `#${i}`, err);
      }
    }
  }
  return {
    has: (hook) => present.has(hook),
    run: (hook, ...args) =>
      each(hook, args, (plugin, err) =>
        log.error({ msg: `plugin hook ${hook} threw; skipped`, plugin, err: err instanceof Error ? err.message : String(err) }),
      ),
    runStrict: (hook, ...args) =>
      each(hook, args, (plugin, err) => {
        throw new PluginHookError(plugin, err);
      }),
  };
}

/** The key as plugins see it: no digest. */
export function pluginKey(key: ApiKeyRecord): PluginKey {
  return { id: key.id, account: key.accountId, kind: key.kind, model: key.model, label: key.label, prefix: key.prefix };
}

/** What every hook around a model call is told first: the request, its key, the model as served and the upstream path. */
export function modelCallHookArgs(
  ctx: { request: Request; requestId: string; key: ApiKeyRecord },
  model: { id: string; upstream: string; upstreamModel: string },
  path: string,
): { request: Request; requestId: string; key: PluginKey; model: { id: string; upstream: string; upstreamModel: string }; path: string } {
  return { request: ctx.request, requestId: ctx.requestId, key: pluginKey(ctx.key), model: { id: model.id, upstream: model.upstream, upstreamModel: model.upstreamModel }, path };
}
