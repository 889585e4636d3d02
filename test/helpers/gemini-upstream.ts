/**
 * A Gemini API upstream for tests, written from Google's documented REST wire format
 * (ai.google.dev/api: `POST /v1beta/models/{model}:generateContent`, and
 * `:streamGenerateContent?alt=sse` whose events are partial `GenerateContentResponse`s,
 * `x-goog-api-key`, errors as `{"error": {"code", "message", "status"}}`), independent of the
 * gateway's own translators. It records every request and answers through `answer`, a
 * function of the request body that tests replace.
 *
 *   const gem = await startGeminiUpstream('AIza...');
 *   gem.answer = (body) => ({ parts: [{ text: 'Hi' }], usageMetadata: { promptTokenCount: 9, candidatesTokenCount: 1 } });
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface GeminiRequest {
  path: string;
  headers: IncomingHttpHeaders;
  raw: string;
  body: Record<string, unknown>;
}

/** What the model answers: its parts, finish reason and usage, or a Google error. */
export type GeminiAnswer =
  | { parts: Array<Record<string, unknown>>; finishReason?: string; usageMetadata?: Record<string, unknown> }
  | { error: { code: number; message: string; status: string } }
  /** A 200 stream of these raw SSE bytes (a stream that breaks, or reports an error mid-way). */
  | { sse: string };

export interface GeminiUpstream {
  /** The base URL with the API version, e.g. http://127.0.0.1:41234/v1beta. */
  url: string;
  requests: GeminiRequest[];
  answer: (body: Record<string, unknown>) => GeminiAnswer;
  close(): Promise<void>;
}

const ROUTE = /^\/v1beta\/models\/([^/:]+):(generateContent|streamGenerateContent)(\?alt=sse)?$/;

/**
 * The default model: with function declarations and no function response yet, it calls the
 * first function (signing the call, as Gemini's thinking models do); after a function
 * response, it says what the function returned; else it greets.
 */
export function defaultAnswer(body: Record<string, unknown>): GeminiAnswer {
  const contents = body.contents as Array<{ role: string; parts: Array<Record<string, unknown>> }>;
  const last = contents.at(-1)!;
  const results = last.parts.filter((p) => p.functionResponse);
  const usageMetadata = { promptTokenCount: 21, candidatesTokenCount: 6, totalTokenCount: 27 };
  if (results.length) {
    const said = results.map((p) => JSON.stringify((p.functionResponse as { response: unknown }).response)).join(' ');
    return { parts: [{ text: `The tool said ${said}` }], finishReason: 'STOP', usageMetadata };
  }
  const tools = body.tools as Array<{ functionDeclarations?: Array<{ name: string }> }> | undefined;
  const fn = tools?.[0]?.functionDeclarations?.[0];
  if (fn) {
    return { parts: [{ functionCall: { name: fn.name, args: { city: 'Paris' } }, thoughtSignature: 'c2lnbmVkLWJ5LWdlbWluaS8rPQ==' }], finishReason: 'STOP', usageMetadata };
  }
  return { parts: [{ text: 'Hello from Gemini.' }], finishReason: 'STOP', usageMetadata };
}

export async function startGeminiUpstream(apiKey: string): Promise<GeminiUpstream> {
  const requests: GeminiRequest[] = [];
  const up: GeminiUpstream = { url: '', requests, answer: defaultAnswer, close: async () => {} };
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json; charset=UTF-8' });
      res.end(JSON.stringify(body));
    };
    const route = req.method === 'POST' ? ROUTE.exec(req.url ?? '') : null;
    if (!route) return send(404, { error: { code: 404, message: `no route ${req.url}`, status: 'NOT_FOUND' } });
    if (req.headers['x-goog-api-key'] !== apiKey) {
      return send(400, { error: { code: 400, message: 'API key not valid. Please pass a valid API key.', status: 'INVALID_ARGUMENT' } });
    }
    const body = JSON.parse(raw) as Record<string, unknown>;
    requests.push({ path: req.url ?? '', headers: req.headers, raw, body });
    const [, model, method, sse] = route;
    const answer = up.answer(body);
    if ('error' in answer) return send(answer.error.code, answer);
    if ('sse' in answer) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      return res.end(answer.sse);
    }
    const responseId = `resp-${requests.length}`;
    const candidate = (parts: unknown[], finishReason?: string) => ({ content: { parts, role: 'model' }, ...(finishReason ? { finishReason } : {}), index: 0 });
    if (method === 'generateContent') {
      return send(200, { candidates: [candidate(answer.parts, answer.finishReason)], usageMetadata: answer.usageMetadata, modelVersion: model, responseId });
    }
    if (!sse) return send(400, { error: { code: 400, message: 'alt=sse expected in this test', status: 'INVALID_ARGUMENT' } });
    // Streamed: text split into pieces, other parts whole; the last event carries the finish
    // reason and the final usage (earlier ones the prompt count so far, as Gemini does).
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const events: unknown[][] = [];
    for (const part of answer.parts) {
      if (typeof part.text === 'string') for (const piece of part.text.match(/.{1,5}/gs) ?? []) events.push([{ text: piece }]);
      else events.push([part]);
    }
    const prompt = { promptTokenCount: answer.usageMetadata?.promptTokenCount };
    events.forEach((parts, i) => {
      const last = i === events.length - 1;
      const event = {
        candidates: [candidate(parts, last ? answer.finishReason : undefined)],
        usageMetadata: last ? answer.usageMetadata : prompt,
        modelVersion: model,
        responseId,
      };
      res.write(`data: ${JSON.stringify(event)}\r\n\r\n`);
    });
    res.end();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  up.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1beta`;
  up.close = async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return up;
}
