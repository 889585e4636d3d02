/** The shapes a Response carried over chat shares between its plain answer and its stream. */
import { randomUUID } from 'node:crypto';
import { isObject } from './shared.js';

/** Why a Response ended short of `completed`, from the chat answer's finish reason. */
export function incompleteReason(finish: unknown): string | null {
  if (finish === 'length') return 'max_output_tokens';
  if (finish === 'content_filter') return 'content_filter';
  return null;
}

/** Responses usage for chat usage (cached and reasoning tokens kept), or null. */
export function responsesUsage(usage: unknown): Record<string, unknown> | null {
  if (!isObject(usage) || typeof usage.prompt_tokens !== 'number' || typeof usage.completion_tokens !== 'number') return null;
  const prompt = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const completion = isObject(usage.completion_tokens_details) ? usage.completion_tokens_details : {};
  const n = (v: unknown) => (typeof v === 'number' ? v : 0);
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: n(prompt.cached_tokens), cache_write_tokens: n(prompt.cache_write_tokens) },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: n(completion.reasoning_tokens) },
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
  };
}

/**
 * The fields every Response object carries; the translation knows only what the answer says.
 * `usage` is left out until there is one (OpenAI's schema has no null usage).
 */
export function responseShell(id: string, model: string, createdAt: number, request?: Record<string, unknown>): Record<string, unknown> {
  const shell: Record<string, unknown> = {
    id,
    object: 'response',
    created_at: createdAt,
    status: 'in_progress',
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    model,
    output: [],
    parallel_tool_calls: true,
    previous_response_id: null,
    store: false,
    temperature: null,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: null,
    truncation: 'disabled',
    metadata: {},
  };
  // A Response echoes the request's settings, as OpenAI's does: what the client sent, else
  // the defaults above.
  if (request) {
    for (const k of ECHOED) if (request[k] !== undefined && request[k] !== null) shell[k] = request[k];
    if (Array.isArray(request.tools)) shell.tools = request.tools.map(echoedTool);
  }
  return shell;
}

/** A function tool as a Response lists it: every field present (null when not sent). */
function echoedTool(tool: unknown): unknown {
  if (!tool || typeof tool !== 'object' || (tool as { type?: unknown }).type !== 'function') return tool;
  const t = tool as Record<string, unknown>;
  return { ...t, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null };
}

/** The request fields a Response echoes. */
const ECHOED = ['instructions', 'max_output_tokens', 'parallel_tool_calls', 'temperature', 'text', 'tool_choice', 'tools', 'top_p', 'metadata'] as const;

export const newId = (prefix: string) => `${prefix}_${randomUUID().replaceAll('-', '')}`;
