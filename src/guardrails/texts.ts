/**
 * The texts a prompt carries, wherever an endpoint puts them: chat and Messages `messages`
 * (content strings and parts' `text`, the arguments of the tool calls in their history, the
 * `input` of a Messages `tool_use`, a Messages document's text, title and context), Messages `system`,
 * Responses `instructions`, `input` (its items' content, a function call's `arguments`, a
 * tool result's `output`) and a stored prompt's `variables`, completions and media `prompt`,
 * a completion's `suffix`, a chat `prediction`, embeddings and speech `input`. Whatever of it
 * goes upstream, the model reads. Other fields (the model, tool definitions, numbers, token
 * arrays, ids) are not prompt text and are left alone.
 */

const PROMPT_FIELDS = ['messages', 'system', 'instructions', 'input', 'prompt', 'suffix', 'prediction'] as const;

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

/**
 * Where a message, a part or an item keeps text: its `content` or `text`, a tool result's
 * `output`, a tool call's `arguments` (a JSON string the model wrote, and reads back; or, as
 * some clients send them, an object), found under `tool_calls` / `function` / `function_call`
 * in a chat history, an assistant's `refusal` there, a Responses reasoning item's `summary`.
 */
const TEXT_KEYS = ['content', 'text', 'output', 'arguments', 'tool_calls', 'function', 'function_call', 'refusal', 'summary'] as const;
/** Keys whose every string, however nested, is text the model reads: a tool's input, a stored prompt's variables. */
const ALL_TEXT_KEYS = ['input', 'variables'] as const;

function mapValue(value: unknown, rewrite: (text: string) => string, depth: number): unknown {
  if (typeof value === 'string') return rewrite(value);
  if (depth >= MAX_DEPTH || !value || typeof value !== 'object') return value;
  if (Array.isArray(value)) return mapItems(value, (item) => mapValue(item, rewrite, depth + 1));
  // A message, a content part or a Responses item: its text is in `content` or `text` (a tool's
  // result handed back to the model in a Responses `function_call_output`'s `output`).
  const object = value as Record<string, unknown>;
  let out: Record<string, unknown> | null = null;
  const set = (name: string, next: unknown) => {
    if (next !== object[name]) (out ??= { ...object })[name] = next;
  };
  for (const name of TEXT_KEYS) {
    if (!Object.hasOwn(object, name)) continue;
    const item = object[name];
    if (name === 'arguments') set(name, typeof item === 'string' ? mapJsonText(item, rewrite) : mapLeaves(item, rewrite, 0));
    else set(name, mapValue(item, rewrite, depth + 1));
  }
  for (const name of ALL_TEXT_KEYS) if (Object.hasOwn(object, name)) set(name, mapLeaves(object[name], rewrite, 0));
  // A Messages document: its title and context, and its text given as text (`source: {type:
  // "text", data}`) or as content blocks (`source: {type: "content", content}`); encoded ones
  // are not text.
  if (object.type === 'document') {
    for (const name of ['title', 'context']) if (typeof object[name] === 'string') set(name, rewrite(object[name]));
  }
  const source = object.source as Record<string, unknown> | undefined;
  if (source && typeof source === 'object' && source.type === 'text' && typeof source.data === 'string') {
    const data = rewrite(source.data);
    if (data !== source.data) set('source', { ...source, data });
  } else if (source && typeof source === 'object' && source.type === 'content') {
    const content = mapValue(source.content, rewrite, depth + 1);
    if (content !== source.content) set('source', { ...source, content });
  }
  return out ?? value;
}

/**
 * A tool call's `arguments`: JSON the model wrote. Each of its strings, keys included, is read
 * decoded (an escape such as `\u0040` hides nothing), and only a string that changed is written
 * again, in place: its numbers, its order and its spacing stay as they came, and no nesting or
 * repeated key hides a string. Text that is not JSON is read whole.
 */
function mapJsonText(text: string, rewrite: (text: string) => string): string {
  try {
    JSON.parse(text);
  } catch {
    return rewrite(text);
  }
  // Valid JSON: every quote outside a string starts one.
  let out = '';
  let last = 0;
  for (let i = text.indexOf('"'); i !== -1; i = text.indexOf('"', i)) {
    let j = i + 1;
    let escaped = false;
    while (j < text.length && text.charCodeAt(j) !== 34) {
      if (text.charCodeAt(j) === 92) {
        escaped = true;
        j += 2;
      } else j++;
    }
    const token = text.slice(i, j + 1);
    const value = escaped ? (JSON.parse(token) as string) : token.slice(1, -1);
    const next = rewrite(value);
    if (next !== value) {
      out += text.slice(last, i) + JSON.stringify(next);
      last = j + 1;
    }
    i = j + 1;
  }
  return last === 0 ? text : out + text.slice(last);
}

/**
 * As deep as any JSON the gateway accepts (a body nested deeper is refused before this): a
 * tool's input is the client's own shape, and none of its strings may be skipped.
 */
const LEAVES_MAX_DEPTH = 256;

/** `value` with `rewrite` applied to every string in it, its keys included (the model reads them too). */
function mapLeaves(value: unknown, rewrite: (text: string) => string, depth: number): unknown {
  if (typeof value === 'string') return rewrite(value);
  if (depth >= LEAVES_MAX_DEPTH || !value || typeof value !== 'object') return value;
  if (Array.isArray(value)) return mapItems(value, (item) => mapLeaves(item, rewrite, depth + 1));
  const entries = Object.entries(value as Record<string, unknown>);
  let changed = false;
  const next = entries.map(([name, item]): [string, unknown] => {
    const key = rewrite(name);
    const v = mapLeaves(item, rewrite, depth + 1);
    if (key !== name || v !== item) changed = true;
    return [key, v];
  });
  return changed ? Object.fromEntries(next) : value;
}

/** `items` with `f` applied to each; the same array when no item changed. */
function mapItems(items: unknown[], f: (item: unknown) => unknown): unknown[] {
  let out: unknown[] | null = null;
  items.forEach((item, i) => {
    const next = f(item);
    if (next !== item) (out ??= [...items])[i] = next;
  });
  return out ?? items;
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
