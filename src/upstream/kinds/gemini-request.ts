/**
 * Chat completions carried by a Gemini upstream, the request half: the chat fields become a
 * `generateContent` call (`streamGenerateContent?alt=sse` for a stream). Every chat field is
 * either carried (messages, tools, sampling and output settings) or refused with a 400 naming
 * it; none is dropped on the way.
 */
import { absent, EXACT_THINKING_BUDGET, isObject, notCarried } from './shared.js';
import { contentsOf } from './gemini-contents.js';

const KIND = 'gemini';
const refuse = (param: string, detail?: string) => notCarried(param, KIND, detail);

/**
 * Fields that change nothing Gemini could do differently: the stream's usage chunk is always
 * sent (the gateway bills from it), and end-user identifiers and cache keys are hints for
 * OpenAI's own abuse checks and cache routing.
 */
const HINTS = new Set(['model', 'messages', 'stream', 'stream_options', 'user', 'safety_identifier', 'prompt_cache_key']);

/**
 * `reasoning_effort` as a thinking budget in tokens, the values Google's own OpenAI
 * compatibility layer uses; `none` turns thinking off where the model allows it.
 */
const THINKING_BUDGET: Record<string, number> = { none: 0, low: 1024, medium: 8192, high: 24_576 };

/** The path of a model's method: `models/{model}` unless the name already says its collection (`tunedModels/x`). */
export function modelPath(model: string, method: string): string {
  const name = model.includes('/') ? model : `models/${model}`;
  return `/${name.split('/').map(encodeURIComponent).join('/')}:${method}`;
}

/** The Gemini call for chat `fields` (already naming the served model). */
export function geminiRequest(fields: Record<string, unknown>, stream: boolean): { path: string; body: Record<string, unknown> } {
  if (typeof fields.model !== 'string' || !fields.model) throw refuse('model', 'a model name is required');
  const body: Record<string, unknown> = contentsOf(fields.messages);
  const generationConfig: Record<string, unknown> = {};
  const tools = declarations(fields.tools, fields.tool_choice);
  if (tools) body.tools = [{ functionDeclarations: tools }];
  const toolConfig = toolConfigOf(fields.tool_choice);
  // A choice among no functions says nothing to Gemini.
  if (toolConfig && tools) body.toolConfig = toolConfig;
  for (const [key, value] of Object.entries(fields)) {
    if (HINTS.has(key) || key === 'tools' || key === 'tool_choice') continue;
    carryField(key, value, generationConfig);
  }
  // A budget the client named exactly (through Messages) goes as named, not as an effort's
  // size, up to the largest every thinking Gemini model takes (the effort `high` sends the
  // same): Anthropic takes larger ones, which some Gemini models would refuse.
  const exact = (fields as Record<symbol, unknown>)[EXACT_THINKING_BUDGET];
  if (typeof exact === 'number') generationConfig.thinkingConfig = { thinkingBudget: Math.min(exact, THINKING_BUDGET.high!) };
  if (Object.keys(generationConfig).length) body.generationConfig = generationConfig;
  const path = stream ? `${modelPath(fields.model, 'streamGenerateContent')}?alt=sse` : modelPath(fields.model, 'generateContent');
  return { path, body };
}

/** One top-level chat field into `config` (Gemini's generationConfig), or a 400 for one it cannot carry. */
function carryField(key: string, value: unknown, config: Record<string, unknown>): void {
  switch (key) {
    case 'temperature':
    case 'seed':
      if (!absent(value)) config[key] = value;
      return;
    case 'top_p':
      if (!absent(value)) config.topP = value;
      return;
    case 'presence_penalty':
      if (!absent(value)) config.presencePenalty = value;
      return;
    case 'frequency_penalty':
      if (!absent(value)) config.frequencyPenalty = value;
      return;
    case 'max_tokens':
    case 'max_completion_tokens':
      // Both caps may come; the tighter one holds (Gemini's cap counts thinking too, as
      // max_completion_tokens counts reasoning).
      if (!absent(value)) config.maxOutputTokens = Math.min(value as number, (config.maxOutputTokens as number | undefined) ?? Number.MAX_SAFE_INTEGER);
      return;
    case 'n':
      if (!absent(value) && value !== 1) config.candidateCount = value;
      return;
    case 'stop':
      if (!absent(value)) config.stopSequences = typeof value === 'string' ? [value] : value;
      return;
    case 'response_format':
      responseFormat(value, config);
      return;
    case 'reasoning_effort':
      if (absent(value)) return;
      if (typeof value !== 'string' || !(value in THINKING_BUDGET)) throw refuse('reasoning_effort', `use one of ${Object.keys(THINKING_BUDGET).join(', ')}`);
      config.thinkingConfig = { thinkingBudget: THINKING_BUDGET[value] };
      return;
    default:
      acceptDefault(key, value);
  }
}

/** Fields accepted only at the value that asks for nothing Gemini lacks. */
function acceptDefault(key: string, value: unknown): void {
  if (absent(value)) return;
  switch (key) {
    case 'parallel_tool_calls':
      // Gemini may always call several functions at once; it cannot be held to one.
      if (value === true) return;
      throw refuse(key, 'Gemini cannot be limited to one tool call per turn');
    case 'logprobs':
      if (value === false) return;
      break;
    case 'store':
      if (value === false) return;
      throw refuse(key, 'the answer cannot be stored');
    case 'service_tier':
      if (value === 'auto' || value === 'default') return;
      break;
    case 'modalities':
      if (Array.isArray(value) && value.every((m) => m === 'text')) return;
      throw refuse(key, 'only text output is carried');
    case 'functions':
    case 'function_call':
      throw refuse(key, 'use `tools` and `tool_choice`');
  }
  throw refuse(key);
}

/** `response_format`: JSON mode and JSON schemas become Gemini's response MIME type and schema. */
function responseFormat(value: unknown, config: Record<string, unknown>): void {
  if (absent(value)) return;
  const format = value as { type?: unknown; json_schema?: unknown };
  if (format.type === 'text') return;
  if (format.type === 'json_object') {
    config.responseMimeType = 'application/json';
    return;
  }
  if (format.type === 'json_schema') {
    config.responseMimeType = 'application/json';
    const schema = isObject(format.json_schema) ? format.json_schema.schema : undefined;
    if (isObject(schema)) config.responseJsonSchema = schema;
    return;
  }
  throw refuse('response_format.type', 'use `text`, `json_object` or `json_schema`');
}

/** The function names `allowed_tools` leaves callable, or null when it does not restrict them. */
function allowedNames(choice: unknown): Set<string> | null {
  if (!isObject(choice) || choice.type !== 'allowed_tools' || !isObject(choice.allowed_tools)) return null;
  const tools = Array.isArray(choice.allowed_tools.tools) ? choice.allowed_tools.tools : [];
  return new Set(tools.map((t) => (isObject(t) && isObject(t.function) ? t.function.name : undefined)).filter((n): n is string => typeof n === 'string'));
}

/**
 * `tools` as Gemini function declarations (JSON Schema parameters), or null when there are
 * none. A function's `strict` has no Gemini counterpart; it is accepted (the docs say so) as
 * the schema still goes to the model.
 */
function declarations(tools: unknown, choice: unknown): Record<string, unknown>[] | null {
  if (absent(tools)) return null;
  if (!Array.isArray(tools)) throw refuse('tools', 'an array of function tools is required');
  const allowed = allowedNames(choice);
  const out: Record<string, unknown>[] = [];
  tools.forEach((tool, i) => {
    if (!isObject(tool) || tool.type !== 'function') throw refuse(`tools[${i}].type`, 'only function tools are carried');
    const fn = tool.function;
    if (!isObject(fn) || typeof fn.name !== 'string' || !fn.name) throw refuse(`tools[${i}].function.name`, 'a function name is required');
    if (allowed && !allowed.has(fn.name)) return;
    const declaration: Record<string, unknown> = { name: fn.name };
    if (typeof fn.description === 'string') declaration.description = fn.description;
    // An object schema without properties declares no parameters: Gemini refuses an empty one.
    const params = fn.parameters;
    if (isObject(params) && !(params.type === 'object' && (!isObject(params.properties) || Object.keys(params.properties).length === 0))) {
      declaration.parametersJsonSchema = params;
    }
    out.push(declaration);
  });
  return out.length ? out : null;
}

/** `tool_choice` as Gemini's function calling mode. */
function toolConfigOf(choice: unknown): Record<string, unknown> | null {
  if (absent(choice)) return null;
  const mode = (m: string, names?: string[]) => ({ functionCallingConfig: { mode: m, ...(names ? { allowedFunctionNames: names } : {}) } });
  if (choice === 'none') return mode('NONE');
  if (choice === 'auto') return mode('AUTO');
  if (choice === 'required') return mode('ANY');
  if (isObject(choice) && choice.type === 'function' && isObject(choice.function) && typeof choice.function.name === 'string') {
    return mode('ANY', [choice.function.name]);
  }
  // The allowed functions are the only ones declared (see `declarations`).
  if (isObject(choice) && choice.type === 'allowed_tools' && isObject(choice.allowed_tools)) {
    const m = choice.allowed_tools.mode;
    if (m === 'auto') return mode('AUTO');
    if (m === 'required') return mode('ANY');
  }
  throw refuse('tool_choice', 'use `none`, `auto`, `required`, a function, or allowed function tools');
}
