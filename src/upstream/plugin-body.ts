/**
 * The plugins' say on a body before it goes upstream (onUpstreamRequest): each plugin sees the
 * body the plugins before it left, and may replace it.
 */
import type { Model } from '../catalog/catalog.js';
import { type Hooks, modelCallHookArgs } from '../pipeline/hooks.js';
import type { RequestContext } from '../pipeline/types.js';
import { GatewayError } from '../errors.js';

/**
 * The body to send upstream once the plugins' onUpstreamRequest hooks have seen it: `encoded`
 * as it is when no plugin replaced it (the common case costs nothing), else the replacement
 * as JSON. Each plugin sees the body the plugins before it left.
 */
export async function pluginBody(
  core: { hooks: Pick<Hooks, 'has' | 'run'> },
  ctx: RequestContext,
  model: Model,
  path: string,
  body: Record<string, unknown>,
  encoded: string | Uint8Array,
): Promise<string | Uint8Array> {
  const replaced = await pluginFields(core, ctx, model, path, body);
  return replaced ? JSON.stringify(replaced) : encoded;
}

/** Runs onUpstreamRequest over `body`; the replacement, or null when no plugin replaced it. */
export async function pluginFields(
  core: { hooks: Pick<Hooks, 'has' | 'run'> },
  ctx: RequestContext,
  model: Model,
  path: string,
  body: Record<string, unknown>,
): Promise<Record<string, unknown> | null> {
  if (!core.hooks.has('onUpstreamRequest')) return null;
  let current = body;
  let replaced = false;
  await core.hooks.run('onUpstreamRequest', {
    ...modelCallHookArgs(ctx, model, path),
    // A copy: a plugin that edits it in place without setBody changes nothing.
    get body() {
      return JSON.parse(JSON.stringify(current)) as Record<string, unknown>;
    },
    // Copied as it is handed over: a plugin that keeps the object and changes it later (after
    // the hold was computed on it) changes nothing that is sent.
    setBody(next: Record<string, unknown>) {
      if (typeof next !== 'object' || next === null || Array.isArray(next)) throw new TypeError('setBody takes the request body as a JSON object');
      current = JSON.parse(JSON.stringify(next)) as Record<string, unknown>;
      replaced = true;
    },
  });
  return replaced ? current : null;
}

/**
 * Fields that decide what a text call costs beyond its tokens, which a hold computed on the
 * body's tokens does not cover: whether it streams, its service tier, hosted tools (and chat's
 * web search), work in the background. The client's are checked against the model's prices
 * before the hold; a plugin may not change them after.
 */
const PRICED_FIELDS = ['service_tier', 'web_search_options', 'background'] as const;

/** A body's hosted tools (those the upstream runs: neither the caller's functions nor custom tools), as text. */
const hostedTools = (tools: unknown): string =>
  JSON.stringify(Array.isArray(tools) ? tools.filter((t: { type?: unknown } | null) => typeof t?.type === 'string' && t.type !== 'function' && t.type !== 'custom') : []);

/**
 * Throws 500 `internal_error` when a plugin's body `replaced` changes a field of `seen` that
 * decides the price other than by tokens (see PRICED_FIELDS), or whether the call streams: the
 * call would be held, checked and billed as the client asked, but run as the plugin asked.
 */
export function refuseUnheldChanges(path: string, seen: Record<string, unknown>, replaced: Record<string, unknown>, stream: boolean): void {
  const changed =
    (replaced.stream === true) !== stream
      ? 'stream'
      : (PRICED_FIELDS.find((f) => JSON.stringify(seen[f] ?? null) !== JSON.stringify(replaced[f] ?? null)) ??
        (hostedTools(seen.tools) !== hostedTools(replaced.tools) ? 'tools' : undefined));
  if (changed) {
    throw new GatewayError('internal_error', `A plugin's onUpstreamRequest changed '${changed}' of a ${path} request: what it decides is checked and held as the client asked, so a plugin may not change it.`);
  }
}
