/**
 * The output a chat answer produced, as text to count with the tokenizer when the upstream
 * reports no usage (or the client left before it did). Every kind a provider bills as
 * completion tokens is counted: content, reasoning, refusals, tool-call and legacy
 * function-call names and arguments, and audio transcripts. Produced output is never billed
 * as zero because it came in a field the gateway did not look at.
 */

interface FunctionLike {
  name?: unknown;
  arguments?: unknown;
}

interface OutputFields {
  content?: unknown;
  reasoning_content?: unknown;
  reasoning?: unknown;
  refusal?: unknown;
  tool_calls?: unknown;
  function_call?: unknown;
  audio?: unknown;
}

function functionText(f: unknown): string {
  if (!f || typeof f !== 'object') return '';
  const { name, arguments: args } = f as FunctionLike;
  return (typeof name === 'string' ? name : '') + (typeof args === 'string' ? args : '');
}

/** Text of `content`: a string, or the text and refusal parts of an array. */
function contentOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    if (!part || typeof part !== 'object') continue;
    const p = part as { text?: unknown; refusal?: unknown; transcript?: unknown };
    if (typeof p.text === 'string') out += p.text;
    else if (typeof p.refusal === 'string') out += p.refusal;
    else if (typeof p.transcript === 'string') out += p.transcript;
  }
  return out;
}

/**
 * The countable text of a streamed `delta` or a plain answer's `message` (they share field
 * names): content, reasoning, refusal, tool calls, legacy function call, audio transcript.
 */
export function producedText(fields: unknown): string {
  if (!fields || typeof fields !== 'object') return '';
  const f = fields as OutputFields;
  let out = contentOf(f.content);
  if (typeof f.reasoning_content === 'string') out += f.reasoning_content;
  else if (typeof f.reasoning === 'string') out += f.reasoning;
  if (typeof f.refusal === 'string') out += f.refusal;
  if (Array.isArray(f.tool_calls)) {
    for (const t of f.tool_calls) out += functionText((t as { function?: unknown } | null)?.function);
  }
  out += functionText(f.function_call);
  if (f.audio && typeof f.audio === 'object') {
    const transcript = (f.audio as { transcript?: unknown }).transcript;
    if (typeof transcript === 'string') out += transcript;
  }
  return out;
}

/** The countable text of every choice of a chunk (`delta`) or a plain answer (`message`). */
export function choicesText(choices: unknown, field: 'delta' | 'message'): string {
  if (!Array.isArray(choices)) return '';
  let out = '';
  for (const c of choices) {
    if (c && typeof c === 'object') out += producedText((c as Record<string, unknown>)[field]);
  }
  return out;
}

/** The text the choices of a legacy completion (or of one streamed chunk of it) produced. */
export function completionText(choices: unknown): string {
  if (!Array.isArray(choices)) return '';
  let out = '';
  for (const c of choices) {
    const text = (c as { text?: unknown } | null)?.text;
    if (typeof text === 'string') out += text;
  }
  return out;
}

/**
 * The countable text of one streamed Responses event: every `*.delta` event carrying text
 * (output text, refusals, reasoning and its summary, function and custom tool call
 * arguments, audio transcripts, code) adds its `delta`. `response.audio.delta` is excluded:
 * its delta is base64 audio, billed through the transcript that comes with it.
 */
export function responseEventText(event: unknown): string {
  if (!event || typeof event !== 'object') return '';
  const { type, delta } = event as { type?: unknown; delta?: unknown };
  if (typeof type !== 'string' || typeof delta !== 'string' || !type.endsWith('.delta')) return '';
  return type === 'response.audio.delta' ? '' : delta;
}

/**
 * The countable text of a Responses `output` array (a plain answer): message text and
 * refusals, function and custom tool calls (name and arguments or input), reasoning text and
 * summaries.
 */
export function responseOutputText(output: unknown): string {
  if (!Array.isArray(output)) return '';
  let out = '';
  const texts = (parts: unknown) => {
    if (!Array.isArray(parts)) return;
    for (const p of parts) {
      if (!p || typeof p !== 'object') continue;
      const { text, refusal } = p as { text?: unknown; refusal?: unknown };
      if (typeof text === 'string') out += text;
      if (typeof refusal === 'string') out += refusal;
    }
  };
  for (const item of output) {
    if (!item || typeof item !== 'object') continue;
    const i = item as { name?: unknown; arguments?: unknown; input?: unknown; content?: unknown; summary?: unknown };
    texts(i.content);
    texts(i.summary);
    if (typeof i.name === 'string') out += i.name;
    if (typeof i.arguments === 'string') out += i.arguments;
    if (typeof i.input === 'string') out += i.input;
  }
  return out;
}
