/**
 * The built-in upstream simulator (`upstreams.X = {simulate: true}`): a deterministic
 * OpenAI-compatible upstream in process, for the demo and the tests. Same prompt, same answer.
 */
import { randomUUID } from 'node:crypto';
import { contentText, type Tokenizer } from '../billing/tokens.js';
import type { Upstream, UpstreamCall, UpstreamResponse } from './client.js';
import { jsonResponse, streamResponse } from './local-response.js';
import { createMediaSimulator, type MediaSimulatorOptions } from './simulator-media.js';
import { sleep } from './sleep.js';

export interface SimulatorOptions extends MediaSimulatorOptions {
  chunkDelayMs: number;
}

const encoder = new TextEncoder();

function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown } | null;
    if (m && m.role === 'user') return contentText(m.content);
  }
  return '';
}

function simulatedAnswer(prompt: string, maxTokens: number | undefined, tokenizer: Tokenizer): string {
  const topic = prompt.trim().split(/\s+/).slice(0, 12).join(' ') || 'your message';
  const words = `Hello! This is the model-gateway simulator answering "${topic}". It echoes a short, deterministic reply so that you can try streaming, metering and limits without a real provider.`.split(
    ' ',
  );
  if (maxTokens === undefined) return words.join(' ');
  // Respect max_tokens like a real model would: stop once the budget is used.
  let out = '';
  for (const w of words) {
    const next = out ? `${out} ${w}` : w;
    if (tokenizer.count(next) > maxTokens) break;
    out = next;
  }
  return out;
}

export function createSimulator(name: string, opts: SimulatorOptions, tokenizer: Tokenizer): Upstream {
  const media = createMediaSimulator(opts, tokenizer);

  async function chat(c: UpstreamCall): Promise<UpstreamResponse> {
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(typeof c.body === 'string' ? c.body : new TextDecoder().decode(c.body ?? new Uint8Array()));
    } catch {
      return jsonResponse(400, { error: { message: 'invalid JSON', type: 'invalid_request_error', code: null } });
    }
    const model = String(body.model);
    const prompt = lastUserText(body.messages);
    const maxTokens =
      typeof body.max_tokens === 'number'
        ? body.max_tokens
        : typeof body.max_completion_tokens === 'number'
          ? body.max_completion_tokens
          : undefined;
    const answer = simulatedAnswer(prompt, maxTokens, tokenizer);
    const promptTokens = Array.isArray(body.messages)
      ? body.messages.reduce((n: number, m: unknown) => n + 4 + tokenizer.count(contentText((m as { content?: unknown })?.content)), 3)
      : 0;
    const completionTokens = tokenizer.count(answer);
    const usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
    const id = `chatcmpl-sim-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    const finish = maxTokens !== undefined && answer.split(' ').length < simulatedAnswer(prompt, undefined, tokenizer).split(' ').length ? 'length' : 'stop';
    if (body.stream !== true) {
      return jsonResponse(200, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: answer }, finish_reason: finish }],
        usage,
      });
    }
    const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
    const words = answer.split(' ');
    const chunk = (delta: Record<string, unknown>, finishReason: string | null, extra: Record<string, unknown> = {}) =>
      encoder.encode(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra })}\n\n`,
      );
    const signal = c.signal;
    const delay = opts.chunkDelayMs;
    async function* events() {
      yield chunk({ role: 'assistant', content: '' }, null);
      for (let i = 0; i < words.length; i++) {
        if (delay > 0) await sleep(delay, signal);
        yield chunk({ content: (i === 0 ? '' : ' ') + words[i] }, null);
      }
      yield chunk({}, finish);
      if (includeUsage) {
        yield encoder.encode(
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [], usage })}\n\n`,
        );
      }
      yield encoder.encode('data: [DONE]\n\n');
    }
    return streamResponse(200, events(), { 'content-type': 'text/event-stream' });
  }

  return {
    name,
    simulated: true,
    async call(c) {
      if (c.method === 'POST' && c.path === '/chat/completions') return chat(c);
      const handled = await media.handle(c);
      if (handled) return handled;
      return jsonResponse(404, { error: { message: `simulator: no route ${c.method} ${c.path}`, type: 'invalid_request_error', code: null } });
    },
    async close() {
      media.close();
    },
  };
}
