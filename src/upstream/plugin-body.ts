/**
 * The plugins' say on a body before it goes upstream (onUpstreamRequest): each plugin sees the
 * body the plugins before it left, and may replace it.
 */
import type { Model } from '../catalog/catalog.js';
import { type Hooks, modelCallHookArgs } from '../pipeline/hooks.js';
import type { RequestContext } from '../pipeline/types.js';

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

