/**
 * Hosted tools: tools the provider runs itself (web search, file search, image generation, a
 * code interpreter, computer use, MCP, ...) and bills per call on top of the tokens. The
 * gateway relays one only when the model's catalog entry prices it (`pricing.tools`, USD per
 * call): anything else would be a cost the operator pays and no tenant is billed for. A priced
 * tool is held at its most calls (`max_tool_calls`, else 10) and billed per call the upstream
 * reports in the answer's output items.
 */
import { withTools } from '../billing/answer.js';
import type { Model } from '../catalog/catalog.js';
import { GatewayError } from '../errors.js';
import { type EventReader, overReader } from '../upstream/stream/reader.js';
import type { ApiKeyRecord } from '../stores/types.js';

/** Tools the client runs itself: their calls and results are tokens, billed as such. */
const CLIENT_TOOLS = new Set(['function', 'custom']);
/** Anthropic's tools that it runs itself, billed per use; its other typed tools (bash, text editor, computer) cost only tokens. */
export const SERVER_TOOL = /^(web_search|web_fetch|code_execution)_/;
/** Hosted tools that produce media: agent keys never get media, whatever the endpoint. */
const MEDIA_TOOLS = new Set(['image_generation']);
/** Calls held when the request does not cap them with `max_tool_calls`. */
export const DEFAULT_MAX_TOOL_CALLS = 10;

const typeOf = (tool: unknown): string | null => {
  const type = tool && typeof tool === 'object' ? (tool as { type?: unknown }).type : undefined;
  return typeof type === 'string' ? type : null;
};

/** 400 `unsupported_tool`, naming the field the tool came in. */
export function unsupportedTool(type: string | null, why: string, param = 'tools'): GatewayError {
  const name = type === null ? 'A tool without a string `type`' : `The hosted tool \`${type.slice(0, 100)}\``;
  return new GatewayError('unsupported_tool', `${name} is not supported ${why}.`, { param });
}

/**
 * Checks the request's `tools` against the model's prices and returns the hosted tool calls
 * to hold (undefined when none is used). `max_tool_calls` caps the calls of all hosted tools
 * together, so the worst case is that many calls of the dearest tool requested.
 */
export function hostedToolsHold(
  model: Model,
  key: ApiKeyRecord,
  tools: readonly unknown[] | null | undefined,
  maxToolCalls: number | null | undefined,
): Record<string, number> | undefined {
  let dearest: { type: string; price: bigint } | null = null;
  for (const tool of tools ?? []) {
    const type = typeOf(tool);
    if (type !== null && CLIENT_TOOLS.has(type)) continue;
    const price = type === null ? undefined : model.toolPrices?.get(type);
    if (type === null || price === undefined) throw unsupportedTool(type, `by the model \`${model.id}\` through this gateway`);
    if (MEDIA_TOOLS.has(type) && key.kind === 'agent') {
      throw new GatewayError('permission_denied', `Agent keys cannot use the hosted tool \`${type}\`: it produces media.`, { param: 'tools' });
    }
    if (!dearest || price > dearest.price) dearest = { type, price };
  }
  return dearest ? { [dearest.type]: maxToolCalls ?? DEFAULT_MAX_TOOL_CALLS } : undefined;
}

/**
 * The output item type that reports one call of a hosted tool: `web_search` and
 * `web_search_preview_2025_03_11` -> `web_search_call`, `computer_use_preview` ->
 * `computer_call`, `mcp` -> `mcp_call`.
 */
function callItemType(tool: string): string {
  const base = tool.replace(/_\d{4}_\d{2}_\d{2}$/, '').replace(/_preview$/, '');
  return base === 'computer_use' ? 'computer_call' : `${base}_call`;
}

/**
 * Counts the calls of the request's priced hosted tools in output items. An item type two
 * requested tools share is billed at the dearer one's price (never less than either).
 */
export class ToolCallCounter {
  private readonly tools = new Map<string, { tool: string; price: bigint }>();
  /** Item ids seen per tool: a call reported by several events counts once. */
  private readonly seen = new Map<string, Set<string>>();
  /** Calls counted in a final response's whole output, per tool. */
  private readonly final = new Map<string, number>();

  constructor(model: Model, tools: readonly unknown[] | null | undefined) {
    for (const t of tools ?? []) {
      const type = typeOf(t);
      const price = type === null ? undefined : model.toolPrices?.get(type);
      if (type === null || price === undefined) continue;
      const itemType = callItemType(type);
      const known = this.tools.get(itemType);
      if (!known || price > known.price) this.tools.set(itemType, { tool: type, price });
    }
  }

  get active(): boolean {
    return this.tools.size > 0;
  }

  /** One output item seen on its own (a stream's `response.output_item.added` / `.done`). */
  item(item: unknown, index: number): void {
    const entry = this.tools.get(typeOf(item) ?? '');
    if (!entry) return;
    const id = (item as { id?: unknown }).id;
    const ids = this.seen.get(entry.tool) ?? new Set<string>();
    ids.add(typeof id === 'string' ? id : `#${index}`);
    this.seen.set(entry.tool, ids);
  }

  /** A final response's whole `output`: every call it reports. */
  output(output: unknown): void {
    if (!Array.isArray(output)) return;
    this.final.clear();
    for (const item of output) {
      const entry = this.tools.get(typeOf(item) ?? '');
      if (entry) this.final.set(entry.tool, (this.final.get(entry.tool) ?? 0) + 1);
    }
  }

  /** The calls to bill per tool (the larger of what the events and the final output report), or null. */
  calls(): Record<string, number> | null {
    const out: Record<string, number> = {};
    for (const { tool } of this.tools.values()) {
      const n = Math.max(this.seen.get(tool)?.size ?? 0, this.final.get(tool) ?? 0);
      if (n > 0) out[tool] = n;
    }
    return Object.keys(out).length ? out : null;
  }
}

/** The reader with the hosted tool calls counted beside it added to what its stream produced. */
export function withToolCalls(reader: EventReader, calls: () => Record<string, number> | null): EventReader {
  return overReader(reader, {
    produced: () => withTools(reader.produced(), calls),
  });
}

/**
 * Fields that decide what a text call costs beyond its tokens, which a hold computed on the
 * body's tokens does not cover: its service tier and where it runs, chat's web search, work in
 * the background, Anthropic's remote MCP servers and container, the hosted tool calls held.
 * The client's are checked against the model's prices before the hold; a plugin may not change
 * them after (nor whether the call streams, nor add or change a hosted tool).
 */
const PRICED_FIELDS = ['service_tier', 'inference_geo', 'web_search_options', 'background', 'mcp_servers', 'container', 'max_tool_calls'] as const;

/** A value as JSON with its keys in order, so that two bodies that say the same compare equal. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    return `{${Object.keys(o).filter((k) => o[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

/** The standard tiers, which change no price: the same as naming none. */
const tierOf = (v: unknown) => (v === 'auto' || v === 'default' || v === undefined ? null : v);

/** Whether a tool of a `path` request is one the provider runs and bills per use. */
const hostedOn = (path: string) => (tool: unknown): boolean => {
  const type = typeOf(tool);
  return type !== null && (path === '/messages' ? SERVER_TOOL.test(type) : !CLIENT_TOOLS.has(type));
};

/**
 * Throws 500 `internal_error` when a plugin's body `replaced` changes a field of `seen` that
 * decides the price other than by tokens (PRICED_FIELDS), whether the call streams, or adds or
 * changes a hosted tool (removing one only costs less): the call would be held, checked and
 * billed as the client asked, but run as the plugin asked.
 */
export function refuseUnheldChanges(path: string, seen: Record<string, unknown>, replaced: Record<string, unknown>, stream: boolean): void {
  const hosted = hostedOn(path);
  const given = new Set((Array.isArray(seen.tools) ? seen.tools : []).filter(hosted).map(canonical));
  const changed =
    (replaced.stream === true) !== stream
      ? 'stream'
      : (PRICED_FIELDS.find((f) => (f === 'service_tier' ? canonical(tierOf(seen[f])) !== canonical(tierOf(replaced[f])) : canonical(seen[f]) !== canonical(replaced[f]))) ??
        ((Array.isArray(replaced.tools) ? replaced.tools : []).some((t) => hosted(t) && !given.has(canonical(t))) ? 'tools' : undefined));
  if (changed) {
    throw new GatewayError('internal_error', `A plugin's onUpstreamRequest changed '${changed}' of a ${path} request: what it decides is checked and held as the client asked, so a plugin may not change it.`);
  }
}
