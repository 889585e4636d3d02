/**
 * Test upstreams that speak the providers' own wire formats, written from their published
 * API references (not from the gateway's translators): Anthropic's Messages API
 * (`POST /v1/messages`, `x-api-key`, `anthropic-version`, typed SSE events) and OpenAI's chat
 * completions (`POST /v1/chat/completions`, `data:` chunks, the usage chunk when asked).
 * Each is a `custom` behavior for startTestUpstream; one scripted answer per request.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Behavior, RecordedRequest } from './upstream.js';
import { UPSTREAM_API_KEY } from './gateway.js';

export interface Script {
  /** The answer's text (none: no text block). */
  text?: string;
  /** A tool call the answer makes (its input streamed in pieces). */
  tool?: { id: string; name: string; input: Record<string, unknown> };
  /** What the provider reports: uncached input, output, cache reads and writes. */
  usage: { input: number; output: number; cacheRead?: number; cacheWrite?: number };
}

const send = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

/** Splits text in a few pieces, as a model streams it. */
const pieces = (text: string, n = 3): string[] => {
  const size = Math.max(1, Math.ceil(text.length / n));
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
};

/** Anthropic's Messages API. */
export function anthropicUpstream(script: Script | ((rec: RecordedRequest) => Script)): Behavior {
  return {
    kind: 'custom',
    handle(_req: IncomingMessage, res: ServerResponse, rec: RecordedRequest) {
      if (rec.method !== 'POST' || rec.path !== '/v1/messages') {
        return send(res, 404, { type: 'error', error: { type: 'not_found_error', message: `no route ${rec.path}` } });
      }
      if (rec.headers['x-api-key'] !== UPSTREAM_API_KEY) {
        return send(res, 401, { type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } });
      }
      if (typeof rec.headers['anthropic-version'] !== 'string') {
        return send(res, 400, { type: 'error', error: { type: 'invalid_request_error', message: 'anthropic-version: header is required' } });
      }
      const body = rec.body ?? {};
      if (typeof body.max_tokens !== 'number' || !Array.isArray(body.messages)) {
        return send(res, 400, { type: 'error', error: { type: 'invalid_request_error', message: 'max_tokens: Field required' } });
      }
      const s = typeof script === 'function' ? script(rec) : script;
      const usage = {
        input_tokens: s.usage.input,
        cache_creation_input_tokens: s.usage.cacheWrite ?? 0,
        cache_read_input_tokens: s.usage.cacheRead ?? 0,
        output_tokens: s.usage.output,
      };
      const content: unknown[] = [];
      if (s.text !== undefined) content.push({ type: 'text', text: s.text });
      if (s.tool) content.push({ type: 'tool_use', ...s.tool });
      const message = { id: 'msg_013Zva2CMHLNnXjNJJKqJ2EF', type: 'message', role: 'assistant', model: body.model, content, stop_sequence: null };
      const stopReason = s.tool ? 'tool_use' : 'end_turn';
      if (body.stream !== true) return send(res, 200, { ...message, stop_reason: stopReason, usage });
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const event = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
      event('message_start', { message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } } });
      let index = 0;
      if (s.text !== undefined) {
        event('content_block_start', { index, content_block: { type: 'text', text: '' } });
        event('ping', {});
        for (const text of pieces(s.text)) event('content_block_delta', { index, delta: { type: 'text_delta', text } });
        event('content_block_stop', { index });
        index++;
      }
      if (s.tool) {
        event('content_block_start', { index, content_block: { type: 'tool_use', id: s.tool.id, name: s.tool.name, input: {} } });
        event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '' } });
        for (const partial_json of pieces(JSON.stringify(s.tool.input))) event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json } });
        event('content_block_stop', { index });
      }
      event('message_delta', { delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: s.usage.output } });
      event('message_stop', {});
      res.end();
    },
  };
}

/** OpenAI's chat completions. */
export function openaiChatUpstream(script: Script | ((rec: RecordedRequest) => Script)): Behavior {
  return {
    kind: 'custom',
    handle(_req: IncomingMessage, res: ServerResponse, rec: RecordedRequest) {
      if (rec.method !== 'POST' || rec.path !== '/v1/chat/completions') {
        return send(res, 404, { error: { message: `no route ${rec.path}`, type: 'invalid_request_error', code: null, param: null } });
      }
      if (rec.headers.authorization !== `Bearer ${UPSTREAM_API_KEY}`) {
        return send(res, 401, { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', code: 'invalid_api_key', param: null } });
      }
      const body = rec.body ?? {};
      const s = typeof script === 'function' ? script(rec) : script;
      // OpenAI counts cached input inside prompt_tokens and has no cache-write count.
      const prompt = s.usage.input + (s.usage.cacheRead ?? 0);
      const usage = {
        prompt_tokens: prompt,
        completion_tokens: s.usage.output,
        total_tokens: prompt + s.usage.output,
        prompt_tokens_details: { cached_tokens: s.usage.cacheRead ?? 0, audio_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
      };
      const call = s.tool ? { id: s.tool.id, type: 'function', function: { name: s.tool.name, arguments: JSON.stringify(s.tool.input) } } : null;
      const finish = call ? 'tool_calls' : 'stop';
      const base = { id: 'chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG', created: 1_741_570_283, model: body.model, system_fingerprint: 'fp_44709d6fcb' };
      if (body.stream !== true) {
        const message = { role: 'assistant', content: s.text ?? null, refusal: null, annotations: [], ...(call ? { tool_calls: [call] } : {}) };
        return send(res, 200, { ...base, object: 'chat.completion', choices: [{ index: 0, message, logprobs: null, finish_reason: finish }], usage, service_tier: 'default' });
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (delta: Record<string, unknown>, finishReason: string | null) =>
        res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] })}\n\n`);
      chunk({ role: 'assistant', content: '', refusal: null }, null);
      for (const content of s.text ? pieces(s.text) : []) chunk({ content }, null);
      if (s.tool) {
        chunk({ tool_calls: [{ index: 0, id: s.tool.id, type: 'function', function: { name: s.tool.name, arguments: '' } }] }, null);
        for (const args of pieces(JSON.stringify(s.tool.input))) chunk({ tool_calls: [{ index: 0, function: { arguments: args } }] }, null);
      }
      chunk({}, finish);
      if ((body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true) {
        res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage })}\n\n`);
      }
      res.write('data: [DONE]\n\n');
      res.end();
    },
  };
}
