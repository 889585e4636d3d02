/**
 * The simulator's Gemini API (`kind: "gemini"`): `models/{model}:generateContent` and
 * `:streamGenerateContent?alt=sse`, answering the last user text deterministically, with
 * `usageMetadata` as Gemini reports it. Implicit caching is the simulator's prompt cache
 * (prompt-cache.ts): a request whose start (system instruction and every turn but the last)
 * an earlier one sent reads it, reported as `cachedContentTokenCount` (Gemini reports no
 * cache writes). A thinking budget is reported as a few `thoughtsTokenCount`.
 */
import { randomUUID } from 'node:crypto';
import type { Tokenizer } from '../../billing/tokens.js';
import type { UpstreamCall, UpstreamResponse } from '../client.js';
import { jsonResponse, streamResponse } from '../local-response.js';
import { sleep } from '../sleep.js';
import type { PromptCache } from './prompt-cache.js';

const ROUTE = /^\/(?:models|tunedModels)\/([^/:]+):(generateContent|streamGenerateContent)(\?alt=sse)?$/;
const encoder = new TextEncoder();

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

const googleError = (code: number, status: string, message: string) => jsonResponse(code, { error: { code, message, status } });

/** The text of a content's parts (function calls and responses as their JSON). */
function textOf(content: unknown): string {
  const parts = isObj(content) && Array.isArray(content.parts) ? content.parts : [];
  return parts
    .map((p) => (isObj(p) ? (typeof p.text === 'string' ? p.text : JSON.stringify(p.functionCall ?? p.functionResponse ?? '')) : ''))
    .join('');
}

function answerText(prompt: string, maxTokens: number | undefined, tokenizer: Tokenizer): { text: string; cut: boolean } {
  const topic = prompt.trim().split(/\s+/).slice(0, 12).join(' ') || 'your message';
  const words = `Hello! This is the model-gateway simulator answering "${topic}" as a Gemini model would, with usage metadata and cached tokens.`.split(' ');
  let out = '';
  for (const w of words) {
    const next = out ? `${out} ${w}` : w;
    if (maxTokens !== undefined && tokenizer.count(next) > maxTokens) return { text: out, cut: true };
    out = next;
  }
  return { text: out, cut: false };
}

export interface GeminiSimulator {
  /** The answer to a Gemini call, or null when `c` is not one. */
  handle(c: UpstreamCall, opts: { chunkDelayMs: number }): UpstreamResponse | null;
}

export function createGeminiSimulator(tokenizer: Tokenizer, cache: PromptCache): GeminiSimulator {
  return {
    handle(c, opts) {
      const route = c.method === 'POST' ? ROUTE.exec(c.path) : null;
      if (!route) return null;
      const [, model, method, sse] = route;
      if (method === 'streamGenerateContent' && !sse) return googleError(400, 'INVALID_ARGUMENT', 'simulator: stream with ?alt=sse');
      let body: Obj;
      try {
        const parsed: unknown = JSON.parse(typeof c.body === 'string' ? c.body : new TextDecoder().decode(c.body ?? new Uint8Array()));
        if (!isObj(parsed)) throw new Error('not an object');
        body = parsed;
      } catch {
        return googleError(400, 'INVALID_ARGUMENT', 'Invalid JSON payload received.');
      }
      const contents = Array.isArray(body.contents) ? body.contents : [];
      if (contents.length === 0) return googleError(400, 'INVALID_ARGUMENT', '* GenerateContentRequest.contents: contents is not specified');
      const segments = [textOf(body.systemInstruction), ...contents.map(textOf)];
      const tokens = segments.map((s) => tokenizer.count(s));
      const promptTokenCount = tokens.reduce((a, b) => a + b, 0);
      const start = segments.slice(0, -1);
      const startTokens = tokens.slice(0, -1).reduce((a, b) => a + b, 0);
      const cachedContentTokenCount = cache.use(`gemini:${model}\n${JSON.stringify(start)}`, startTokens, promptTokenCount).cached;
      const config = isObj(body.generationConfig) ? body.generationConfig : {};
      const budget = isObj(config.thinkingConfig) && typeof config.thinkingConfig.thinkingBudget === 'number' ? config.thinkingConfig.thinkingBudget : 0;
      const thoughtsTokenCount = Math.min(Math.max(budget, 0), 24);
      const maxTokens = typeof config.maxOutputTokens === 'number' ? Math.max(0, config.maxOutputTokens - thoughtsTokenCount) : undefined;
      const lastUser = [...contents].reverse().find((m) => isObj(m) && m.role === 'user');
      const { text, cut } = answerText(textOf(lastUser), maxTokens, tokenizer);
      const candidatesTokenCount = tokenizer.count(text);
      const usageMetadata: Obj = {
        promptTokenCount,
        candidatesTokenCount,
        totalTokenCount: promptTokenCount + candidatesTokenCount + thoughtsTokenCount,
        ...(cachedContentTokenCount ? { cachedContentTokenCount } : {}),
        ...(thoughtsTokenCount ? { thoughtsTokenCount } : {}),
      };
      const responseId = randomUUID().replaceAll('-', '').slice(0, 22);
      const finishReason = cut ? 'MAX_TOKENS' : 'STOP';
      const answer = (parts: string, finish: string | null, usage: Obj) => ({
        candidates: [{ content: { parts: [{ text: parts }], role: 'model' }, ...(finish ? { finishReason: finish } : {}), index: 0 }],
        usageMetadata: usage,
        modelVersion: model,
        responseId,
      });
      if (method === 'generateContent') return jsonResponse(200, answer(text, finishReason, usageMetadata));
      const words = text.split(' ');
      async function* events() {
        for (let i = 0; i < words.length; i++) {
          if (opts.chunkDelayMs > 0) await sleep(opts.chunkDelayMs, c.signal);
          const last = i === words.length - 1;
          const chunk = answer((i === 0 ? '' : ' ') + words[i], last ? finishReason : null, last ? usageMetadata : { promptTokenCount, totalTokenCount: promptTokenCount });
          yield encoder.encode(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
        }
      }
      return streamResponse(200, events(), { 'content-type': 'text/event-stream' });
    },
  };
}
