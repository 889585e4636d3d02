/**
 * The texts a prompt carries, wherever an endpoint puts them: chat and Messages `messages`
 * (content strings and parts' `text`), Messages `system`, Responses `instructions` and `input`
 * (its items' content, and the `output` of a tool's result), completions and media `prompt`,
 * embeddings and speech `input`. Other fields (the model, tools, numbers, token arrays) are not
 * prompt text and are left alone.
 */

const PROMPT_FIELDS = ['messages', 'system', 'instructions', 'input', 'prompt'] as const;

/**
 * `fields` with `rewrite` applied to every prompt text; the same object when no text changed
 * (so an untouched body can still go upstream as the client sent it). Never edits in place.
 */
export function mapPromptTexts(fields: Record<string, unknown>, rewrite: (text: string) => string): Record<string, unknown> {
  let out: Record<string, unknown> | null = null;
  for (const name of PROMPT_FIELDS) {
    if (!Object.hasOwn(fields, name)) continue;
    const next = mapValue(fields[name], rewrite, 0);
    if (next !== fields[name]) (out ??= { ...fields })[name] = next;
  }
  return out ?? fields;
}

/** Whether `test` holds for some prompt text of `fields`. */
export function somePromptText(fields: Record<string, unknown>, test: (text: string) => boolean): boolean {
  let found = false;
  mapPromptTexts(fields, (text) => {
    if (!found && test(text)) found = true;
    return text;
  });
  return found;
}

/**
 * Deep enough for a message's parts and a tool result's nested content; a body nested deeper
 * than any API shape is not prompt text an endpoint would read.
 */
const MAX_DEPTH = 8;

const TEXT_KEYS = ['content', 'text', 'output'] as const;

function mapValue(value: unknown, rewrite: (text: string) => string, depth: number): unknown {
  if (typeof value === 'string') return rewrite(value);
  if (depth >= MAX_DEPTH || !value || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    let out: unknown[] | null = null;
    value.forEach((item, i) => {
      const next = mapValue(item, rewrite, depth + 1);
      if (next !== item) (out ??= [...value])[i] = next;
    });
    return out ?? value;
  }
  // A message, a content part or a Responses item: its text is in `content` or `text` (a tool's
  // result handed back to the model in a Responses `function_call_output`'s `output`).
  const object = value as Record<string, unknown>;
  let out: Record<string, unknown> | null = null;
  for (const name of TEXT_KEYS) {
    if (!Object.hasOwn(object, name)) continue;
    const next = mapValue(object[name], rewrite, depth + 1);
    if (next !== object[name]) (out ??= { ...object })[name] = next;
  }
  return out ?? value;
}

/** Every prompt text of `fields`, in order. */
export function promptTexts(fields: Record<string, unknown>): string[] {
  const out: string[] = [];
  mapPromptTexts(fields, (text) => {
    out.push(text);
    return text;
  });
  return out;
}
