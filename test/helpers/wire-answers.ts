/**
 * Scripted upstream answers in each provider's own wire format, written from their API
 * references (OpenAI chat completions, Anthropic Messages, Gemini generateContent), plain and
 * streamed, with their usage reported in every way a provider (or a broken one) may: at the
 * end, not at all, early (before the output), partly, as a string, or negative. A small
 * loopback server answers each request with the next scripted answer, and may cut a stream
 * after a given number of bytes.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export type WireKind = 'openai' | 'anthropic' | 'gemini';
/** The formats an upstream answers in: a kind's own, or OpenAI's Responses API (`/responses`). */
export type WireFormat = WireKind | 'responses';
/**
 * `early-then-final`: an opening report before the output (no output counted yet), then the final one after it.
 * `finish-then-final` (OpenAI streams; elsewhere `final`): a report of 40 output tokens on the finish chunk, then the final one.
 */
export type UsagePlan = 'final' | 'absent' | 'early' | 'early-then-final' | 'finish-then-final' | 'partial' | 'string' | 'negative';

export interface ScriptedAnswer {
  /** The answer's text, as the pieces it streams in. */
  pieces: string[];
  usage: UsagePlan;
  /** What the usage reports when it reports counts. */
  prompt: number;
  completion: number;
  /**
   * Responses only: the text comes as deltas then its `.done` events (default), only in the
   * `.done` events, or only whole in the finished item and the terminal response.
   */
  textIn?: 'deltas' | 'done-only' | 'item-only';
  /** OpenAI streams only: the body ends after the finish and the usage, with no `data: [DONE]` (some OpenAI-compatible servers do). */
  noDone?: boolean;
  /** OpenAI streams only: no chunk carries a finish_reason (with `noDone`, a stream that ends cleanly, unfinished). */
  noFinish?: boolean;
}

const json = (v: unknown) => JSON.stringify(v);

/** The output count a usage plan reports (undefined: left out). */
function completionOf(a: ScriptedAnswer): unknown {
  if (a.usage === 'string') return String(a.completion);
  if (a.usage === 'negative') return -5;
  if (a.usage === 'partial') return undefined;
  if (a.usage === 'early') return 5;
  return a.completion;
}

function openaiUsage(a: ScriptedAnswer): Record<string, unknown> {
  const c = completionOf(a);
  return { prompt_tokens: a.prompt, ...(c === undefined ? {} : { completion_tokens: c }), total_tokens: a.prompt + a.completion };
}

function anthropicUsage(a: ScriptedAnswer, output: unknown): Record<string, unknown> {
  return { input_tokens: a.prompt, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, ...(output === undefined ? {} : { output_tokens: output }) };
}

function geminiUsage(a: ScriptedAnswer, candidates: unknown): Record<string, unknown> {
  return { promptTokenCount: a.prompt, ...(candidates === undefined ? {} : { candidatesTokenCount: candidates }), totalTokenCount: a.prompt + a.completion };
}

function responsesUsage(a: ScriptedAnswer): Record<string, unknown> {
  const c = completionOf(a);
  return { input_tokens: a.prompt, ...(c === undefined ? {} : { output_tokens: c }), total_tokens: a.prompt + a.completion };
}

/** An answer of OpenAI's Responses API, plain or as its typed events. */
function responsesAnswer(a: ScriptedAnswer, stream: boolean, model: string): string {
  const text = a.pieces.join('');
  const reports = a.usage !== 'absent';
  const message = { id: 'msg_wire1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text, annotations: [] }] };
  const response = (status: string, output: unknown[], usage: boolean) => ({
    id: 'resp_wire1',
    object: 'response',
    created_at: 1_700_000_000,
    model,
    status,
    output,
    ...(usage && reports ? { usage: responsesUsage(a) } : {}),
  });
  if (!stream) return json(response('completed', [message], true));
  let seq = 0;
  const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${json({ type, sequence_number: seq++, ...data })}\n\n`;
  let out = event('response.created', { response: response('in_progress', [], false) });
  out += event('response.output_item.added', { output_index: 0, item: { ...message, status: 'in_progress', content: [] } });
  if (a.textIn !== 'done-only' && a.textIn !== 'item-only') for (const p of a.pieces) out += event('response.output_text.delta', { item_id: 'msg_wire1', output_index: 0, content_index: 0, delta: p });
  if (a.textIn !== 'item-only') out += event('response.output_text.done', { item_id: 'msg_wire1', output_index: 0, content_index: 0, text });
  out += event('response.output_item.done', { output_index: 0, item: message });
  out += event('response.completed', { response: response('completed', [message], true) });
  return out;
}

/** The whole answer's bytes in `kind`'s format. */
export function wireAnswer(kind: WireFormat, a: ScriptedAnswer, stream: boolean, model: string): { contentType: string; body: string } {
  if (kind === 'responses') return { contentType: stream ? 'text/event-stream' : 'application/json', body: responsesAnswer(a, stream, model) };
  const text = a.pieces.join('');
  const reports = a.usage !== 'absent';
  if (!stream) {
    const body =
      kind === 'openai'
        ? {
            id: 'chatcmpl-wire1',
            object: 'chat.completion',
            created: 1_700_000_000,
            model,
            choices: [{ index: 0, message: { role: 'assistant', content: text, refusal: null }, logprobs: null, finish_reason: 'stop' }],
            ...(reports ? { usage: openaiUsage(a) } : {}),
          }
        : kind === 'anthropic'
          ? {
              id: 'msg_wire1',
              type: 'message',
              role: 'assistant',
              model,
              content: [{ type: 'text', text }],
              stop_reason: 'end_turn',
              stop_sequence: null,
              ...(reports ? { usage: anthropicUsage(a, completionOf(a)) } : {}),
            }
          : {
              candidates: [{ content: { role: 'model', parts: [{ text }] }, finishReason: 'STOP', index: 0 }],
              modelVersion: model,
              responseId: 'wire1',
              ...(reports ? { usageMetadata: geminiUsage(a, completionOf(a)) } : {}),
            };
    return { contentType: 'application/json', body: json(body) };
  }
  let out = '';
  if (kind === 'openai') {
    const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
      `data: ${json({ id: 'chatcmpl-wire1', object: 'chat.completion.chunk', created: 1_700_000_000, model, choices, ...extra })}\n\n`;
    out += chunk([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]);
    if (a.usage === 'early') out += chunk([], { usage: openaiUsage(a) });
    if (a.usage === 'early-then-final') out += chunk([], { usage: { prompt_tokens: a.prompt, completion_tokens: 0, total_tokens: a.prompt } });
    for (const p of a.pieces) out += chunk([{ index: 0, delta: { content: p }, logprobs: null, finish_reason: null }]);
    const withFinish = a.usage === 'finish-then-final' ? { usage: { prompt_tokens: a.prompt, completion_tokens: 40, total_tokens: a.prompt + 40 } } : {};
    if (!a.noFinish) out += chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }], withFinish);
    if (reports && a.usage !== 'early') out += chunk([], { usage: openaiUsage(a) });
    if (!a.noDone) out += 'data: [DONE]\n\n';
  } else if (kind === 'anthropic') {
    const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${json({ type, ...data })}\n\n`;
    const opening = a.usage === 'early' ? 5 : 1;
    out += event('message_start', {
      message: { id: 'msg_wire1', type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: anthropicUsage(a, opening) },
    });
    out += event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
    for (const p of a.pieces) out += event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: p } });
    out += event('content_block_stop', { index: 0 });
    const final = reports && a.usage !== 'early' ? { usage: { output_tokens: completionOf(a) } } : {};
    out += event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, ...final });
    out += event('message_stop', {});
  } else {
    const event = (data: Record<string, unknown>) => `data: ${json({ modelVersion: model, responseId: 'wire1', ...data })}\n\n`;
    a.pieces.forEach((p, i) => {
      const last = i === a.pieces.length - 1;
      const candidate = { content: { role: 'model', parts: [{ text: p }] }, index: 0, ...(last ? { finishReason: 'STOP' } : {}) };
      const opening = a.usage === 'early' || a.usage === 'early-then-final';
      const usage =
        opening && i === 0 && !last
          ? { usageMetadata: geminiUsage(a, 1) }
          : a.usage !== 'early' && reports && last
            ? { usageMetadata: geminiUsage(a, completionOf(a)) }
            : {};
      out += event({ candidates: [candidate], ...usage });
    });
  }
  return { contentType: 'text/event-stream', body: out };
}

export interface WireRequest {
  path: string;
  body: Record<string, unknown>;
}

export interface WireUpstream {
  url: string;
  requests: WireRequest[];
  /**
   * The next answers, in `kind`'s format (a request to `/responses` is answered in Responses'
   * own). `cutAt`: that many bytes of a stream are sent, then the connection is destroyed.
   * `pauseMs`: a stream's first event goes out at once, the rest that much later.
   */
  script(kind: WireKind, answer: ScriptedAnswer, cutAt?: number, pauseMs?: number): void;
  close(): Promise<void>;
}

/** A loopback upstream that answers every request with the scripted answer in its kind's format. */
export async function startWireUpstream(): Promise<WireUpstream> {
  let current: { kind: WireKind; answer: ScriptedAnswer; cutAt?: number | undefined; pauseMs?: number | undefined } | null = null;
  const requests: WireRequest[] = [];
  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8') || '{}') as Record<string, unknown>;
      const path = req.url ?? '';
      requests.push({ path, body });
      if (!current) {
        res.writeHead(500).end('{"error":{"message":"no script"}}');
        return;
      }
      const stream = path.includes('streamGenerateContent') || body.stream === true;
      const model = typeof body.model === 'string' ? body.model : 'gemini-wire';
      const format: WireFormat = path.endsWith('/responses') ? 'responses' : current.kind;
      const { contentType, body: text } = wireAnswer(format, current.answer, stream, model);
      res.writeHead(200, { 'content-type': contentType });
      const cut = current.cutAt;
      const pause = current.pauseMs;
      if (stream && pause !== undefined) {
        const first = text.indexOf('\n\n') + 2;
        res.write(text.slice(0, first));
        const timer = setTimeout(() => res.end(text.slice(first)), pause);
        res.on('close', () => clearTimeout(timer));
        return;
      }
      if (stream && cut !== undefined && cut < Buffer.byteLength(text)) {
        res.write(Buffer.from(text).subarray(0, cut), () => setTimeout(() => res.destroy(), 5));
        return;
      }
      res.end(text);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    script(kind, answer, cutAt, pauseMs) {
      current = { kind, answer, cutAt, pauseMs };
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
