/**
 * A tiny OpenAI-compatible upstream for the framework tests: POST /v1/chat/completions
 * answers JSON, or (stream: true) SSE chunks `intervalMs` apart. Every exchange records when
 * each chunk was written (performance.now() of this process) and whether the gateway hung
 * up before the end, so a test can tell buffering and disconnects apart.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';

export const WORDS = ['Hello', ' from', ' the', ' slow', ' upstream', '.'];
export const REPLY = WORDS.join('');

export interface Exchange {
  stream: boolean;
  /** When each content chunk was written. */
  sentAt: number[];
  /** The gateway closed the connection before the last chunk. */
  closedEarly: boolean;
  /** Resolves when the exchange is over, either way. */
  over: Promise<void>;
}

export interface SlowUpstream {
  /** Base URL for the gateway's `upstreams` entry (ends with /v1). */
  url: string;
  exchanges: Exchange[];
  close(): Promise<void>;
}

export async function startSlowUpstream(options: { intervalMs?: number } = {}): Promise<SlowUpstream> {
  const intervalMs = options.intervalMs ?? 200;
  const exchanges: Exchange[] = [];

  const server = createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
      return;
    }
    void readJson(req).then(async (body) => {
      let finish!: () => void;
      const exchange: Exchange = { stream: body.stream === true, sentAt: [], closedEarly: false, over: new Promise((r) => (finish = r)) };
      exchanges.push(exchange);
      const messages = Array.isArray(body.messages) ? (body.messages as Array<{ content?: unknown }>) : [];
      const last = String(messages.at(-1)?.content ?? '');
      // "[wait:MS] ...": no answer at all for MS (a model slow to start); a caller gone meanwhile is seen.
      const wait = /^\[wait:(\d+)\]/.exec(last);
      if (wait) {
        res.once('close', () => {
          if (!res.headersSent) {
            exchange.closedEarly = true;
            finish();
          }
        });
        await new Promise((r) => setTimeout(r, Number(wait[1])));
        if (exchange.closedEarly) return;
      }
      if (!exchange.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(completion(body.model)));
        exchange.sentAt.push(performance.now());
        finish();
        return;
      }
      // "[late:MS] ...": the 200 at once and the first event MS later.
      const late = /^\[late:(\d+)\]/.exec(last);
      streamChunks(res, exchange, String(body.model), intervalMs, finish, late ? Number(late[1]) : 0);
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    exchanges,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function streamChunks(res: ServerResponse, exchange: Exchange, model: string, intervalMs: number, finish: () => void, firstAfterMs: number): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  if (firstAfterMs > 0) res.flushHeaders();
  const base = { id: 'chatcmpl-slow', object: 'chat.completion.chunk', created: 1, model };
  let i = 0;
  let timer: NodeJS.Timeout | undefined;
  const event = (value: unknown) => res.write(`data: ${JSON.stringify(value)}\n\n`);
  res.on('close', () => {
    if (!res.writableFinished) {
      exchange.closedEarly = true;
      clearTimeout(timer);
      finish();
    }
  });
  const tick = () => {
    if (res.destroyed) return;
    if (i < WORDS.length) {
      event({ ...base, choices: [{ index: 0, delta: i === 0 ? { role: 'assistant', content: WORDS[i] } : { content: WORDS[i] }, finish_reason: null }] });
      exchange.sentAt.push(performance.now());
      i += 1;
      timer = setTimeout(tick, intervalMs);
      return;
    }
    event({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
    event({ ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: WORDS.length, total_tokens: 9 + WORDS.length } });
    res.end('data: [DONE]\n\n');
    finish();
  };
  if (firstAfterMs > 0) timer = setTimeout(tick, firstAfterMs);
  else tick();
}

function completion(model: unknown) {
  return {
    id: 'chatcmpl-slow',
    object: 'chat.completion',
    created: 1,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: REPLY }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 9, completion_tokens: WORDS.length, total_tokens: 9 + WORDS.length },
  };
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const parts: Buffer[] = [];
  for await (const chunk of req) parts.push(chunk as Buffer);
  try {
    return JSON.parse(Buffer.concat(parts).toString('utf8')) as Record<string, unknown>;
  } catch {
    return {};
  }
}
