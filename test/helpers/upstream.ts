/**
 * A small OpenAI-compatible upstream for tests: node:http on 127.0.0.1, an ephemeral port,
 * scripted answers ("behaviors"), and a record of every request it got, including whether
 * and how its connection ended (so tests can observe the gateway closing it).
 *
 *   const up = await startTestUpstream();
 *   up.setBehavior({ kind: 'stream', chunks: ['Hel', 'lo'], delayMs: 50, usage: false });
 *   ... call the gateway ...
 *   up.requests[0].body.stream_options  // what the gateway sent
 *   await up.requests[0].closed         // resolves once the exchange is over, either way
 *   await up.close();
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface UsageCounts {
  prompt_tokens: number;
  completion_tokens: number;
}

export type Behavior =
  /** 200 chat.completion (or any status / body when `status` / `body` are given). */
  | {
      kind: 'json';
      content?: string;
      /** Usage to report; null sends no `usage` field. Default {prompt_tokens: 11, completion_tokens: 7}. */
      usage?: UsageCounts | null;
      /** The `model` field of the answer. Default: the model the request named. */
      model?: string;
      status?: number;
      /** Sent as is instead of a chat.completion. */
      body?: unknown;
      /** The answer waits for this before it is sent. */
      gate?: Promise<unknown>;
    }
  /** An SSE chat stream: a role chunk, one chunk per `chunks` entry, a finish chunk, usage, [DONE]. */
  | {
      kind: 'stream';
      chunks?: string[];
      /**
       * true (default): a usage chunk when the request asked with `stream_options.include_usage`.
       * false: never a usage chunk (an upstream that ignores the option).
       */
      usage?: boolean;
      /** Counts to report in the usage chunk. Default: prompt 11, completion = number of chunks. */
      usageCounts?: UsageCounts;
      /** Delay before each content chunk, ms. Default 0. */
      delayMs?: number;
      /** Destroys the socket (RST) after this many content chunks were written. */
      resetAfter?: number;
      /** Send the final `data: [DONE]`. Default true. */
      done?: boolean;
      /** The `model` field of each chunk. Default: the model the request named. */
      model?: string;
    }
  /** 200 embeddings list, one vector per input; `promptTokens` null sends no usage. Default 9. */
  | { kind: 'embeddings'; promptTokens?: number | null }
  /** 200 legacy text_completion (plain), or its SSE stream when the request has stream: true. */
  | {
      kind: 'completion';
      chunks?: string[];
      /** Usage to report (plain; streamed only when asked with include_usage). null: none. */
      usage?: UsageCounts | null;
      /** Destroys the socket after this many streamed chunks. */
      resetAfter?: number;
    }
  /**
   * 200 Responses API answer (plain), or its typed SSE events when the request has
   * stream: true: response.created, one output_text.delta per chunk, response.completed.
   */
  | {
      kind: 'response';
      chunks?: string[];
      /** input / output tokens to report; null: no usage in the answer or in response.completed. */
      usage?: { input_tokens: number; output_tokens: number } | null;
      /** Destroys the socket after this many streamed deltas (no response.completed). */
      resetAfter?: number;
      /** Sends an `error` event after this many deltas, then ends the stream. */
      errorAfter?: number;
      /** `id`: the response's (default "resp_test"); `items`: output items before the message (hosted tool calls), streamed as `response.output_item.done`. */
      id?: string;
      items?: Array<Record<string, unknown>>;
    }
  /** An OpenAI-style error answer. */
  | { kind: 'error'; status: number; message?: string; type?: string; code?: string | null; param?: string | null; body?: string }
  /** Reads the request and never answers. */
  | { kind: 'hang' }
  /** Anything else. */
  | { kind: 'custom'; handle(req: IncomingMessage, res: ServerResponse, rec: RecordedRequest): void | Promise<void> };

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The raw body text. */
  raw: string;
  /** The parsed JSON body, or undefined when it was not JSON. */
  body: Record<string, unknown> | undefined;
  /** The behavior that answered it. */
  behavior: Behavior['kind'];
  /** Content chunks written so far (stream behaviors). */
  chunksSent: number;
  /** True once the response was completely written (ended normally). */
  completed: boolean;
  /** True once the exchange is over: the response finished, or the connection closed under it. */
  isClosed: boolean;
  /** True when the connection closed before the response was completely written. */
  closedEarly: boolean;
  /** Resolves when `isClosed` becomes true. */
  closed: Promise<void>;
}

export interface TestUpstream {
  /** Base URL with /v1, e.g. http://127.0.0.1:43121/v1: configure it as an upstream's baseUrl. */
  url: string;
  /** The origin without a path. */
  origin: string;
  requests: RecordedRequest[];
  /** Sets the behavior for the requests that follow (a function picks one per request). */
  setBehavior(b: Behavior | ((rec: RecordedRequest, index: number) => Behavior)): void;
  /** Resolves once `n` requests have arrived (their bodies read). */
  waitForRequests(n: number): Promise<void>;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function chatCompletion(model: string, content: string, usage: UsageCounts | null) {
  return {
    id: 'chatcmpl-test',
    object: 'chat.completion',
    created: 1_700_000_000,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    ...(usage ? { usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } } : {}),
  };
}

export async function startTestUpstream(): Promise<TestUpstream> {
  let behavior: Behavior | ((rec: RecordedRequest, index: number) => Behavior) = { kind: 'json' };
  const requests: RecordedRequest[] = [];
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  const sockets = new Set<Socket>();

  const server = createServer((req, res) => {
    void handle(req, res);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });

  async function handle(req: IncomingMessage, res: ServerResponse) {
    let markClosed!: () => void;
    const rec: RecordedRequest = {
      method: req.method ?? '',
      path: req.url ?? '',
      headers: req.headers,
      raw: '',
      body: undefined,
      behavior: 'json',
      chunksSent: 0,
      completed: false,
      isClosed: false,
      closedEarly: false,
      closed: new Promise<void>((r) => (markClosed = r)),
    };
    res.on('finish', () => {
      rec.completed = true;
    });
    res.on('close', () => {
      rec.isClosed = true;
      rec.closedEarly = !rec.completed;
      markClosed();
    });

    const parts: Buffer[] = [];
    try {
      for await (const p of req) parts.push(p as Buffer);
    } catch {
      return;
    }
    rec.raw = Buffer.concat(parts).toString('utf8');
    try {
      const parsed: unknown = JSON.parse(rec.raw);
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) rec.body = parsed as Record<string, unknown>;
    } catch {
      // not JSON
    }
    const index = requests.length;
    requests.push(rec);
    for (const w of [...waiters]) {
      if (requests.length >= w.n) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
    const b = typeof behavior === 'function' ? behavior(rec, index) : behavior;
    rec.behavior = b.kind;
    const model = typeof rec.body?.model === 'string' ? rec.body.model : 'unknown';
    try {
      switch (b.kind) {
        case 'json': {
          if (b.gate) await b.gate;
          if (res.destroyed) return;
          const usage = b.usage === undefined ? { prompt_tokens: 11, completion_tokens: 7 } : b.usage;
          const payload = b.body ?? chatCompletion(b.model ?? model, b.content ?? 'Hello from the test upstream.', usage);
          res.writeHead(b.status ?? 200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(payload));
          return;
        }
        case 'error': {
          res.writeHead(b.status, { 'content-type': b.body !== undefined ? 'text/plain' : 'application/json' });
          res.end(
            b.body ??
              JSON.stringify({
                error: {
                  message: b.message ?? `test upstream error ${b.status}`,
                  type: b.type ?? 'invalid_request_error',
                  code: b.code ?? null,
                  param: b.param ?? null,
                },
              }),
          );
          return;
        }
        case 'hang':
          return;
        case 'embeddings': {
          const input = rec.body?.input;
          const items = typeof input === 'string' || (Array.isArray(input) && typeof input[0] === 'number') ? [input] : (input as unknown[]);
          const tokens = b.promptTokens === undefined ? 9 : b.promptTokens;
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              object: 'list',
              data: items.map((_, index) => ({ object: 'embedding', index, embedding: [0.1, 0.2, 0.3] })),
              model,
              ...(tokens === null ? {} : { usage: { prompt_tokens: tokens, total_tokens: tokens } }),
            }),
          );
          return;
        }
        case 'completion': {
          const chunks = b.chunks ?? ['Once', ' upon', ' a', ' time'];
          const usage = b.usage === undefined ? { prompt_tokens: 11, completion_tokens: chunks.length } : b.usage;
          const base = { id: 'cmpl-test', object: 'text_completion', created: 1_700_000_000, model };
          const withTotal = (u: UsageCounts) => ({ ...u, total_tokens: u.prompt_tokens + u.completion_tokens });
          if (rec.body?.stream !== true) {
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end(
              JSON.stringify({
                ...base,
                choices: [{ index: 0, text: chunks.join(''), logprobs: null, finish_reason: 'stop' }],
                ...(usage ? { usage: withTotal(usage) } : {}),
              }),
            );
            return;
          }
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.flushHeaders();
          const event = (choices: unknown[], extra: Record<string, unknown> = {}) =>
            res.write(`data: ${JSON.stringify({ ...base, choices, ...extra })}\n\n`);
          for (let i = 0; i < chunks.length; i++) {
            if (b.resetAfter !== undefined && i === b.resetAfter) {
              await sleep(10);
              req.socket.resetAndDestroy();
              return;
            }
            event([{ index: 0, text: chunks[i], logprobs: null, finish_reason: null }]);
            rec.chunksSent++;
          }
          event([{ index: 0, text: '', logprobs: null, finish_reason: 'stop' }]);
          const opts = rec.body?.stream_options as { include_usage?: unknown } | undefined;
          if (usage && opts?.include_usage === true) event([], { usage: withTotal(usage) });
          res.end('data: [DONE]\n\n');
          return;
        }
        case 'response': {
          const chunks = b.chunks ?? ['Hello', ' from', ' Responses'];
          const usage = b.usage === undefined ? { input_tokens: 13, output_tokens: chunks.length } : b.usage;
          const text = chunks.join('');
          const message = { id: 'msg_test', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text, annotations: [] }] };
          const items = b.items ?? [];
          const response = (status: string, output: unknown[], u: typeof usage) => ({
            id: b.id ?? 'resp_test',
            object: 'response',
            created_at: 1_700_000_000,
            model,
            status,
            error: null,
            incomplete_details: null,
            instructions: rec.body?.instructions ?? null,
            output,
            parallel_tool_calls: true,
            tool_choice: 'auto',
            tools: [],
            ...(u ? { usage: { ...u, total_tokens: u.input_tokens + u.output_tokens, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } } } : { usage: null }),
          });
          if (rec.body?.stream !== true) {
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end(JSON.stringify(response('completed', [...items, message], usage)));
            return;
          }
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.flushHeaders();
          let seq = 0;
          const event = (type: string, data: Record<string, unknown>) =>
            res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`);
          event('response.created', { response: response('in_progress', [], null) });
          for (const [i, item] of items.entries()) event('response.output_item.done', { output_index: i, item });
          for (let i = 0; i < chunks.length; i++) {
            if (b.resetAfter !== undefined && i === b.resetAfter) {
              await sleep(10);
              req.socket.resetAndDestroy();
              return;
            }
            if (b.errorAfter !== undefined && i === b.errorAfter) {
              event('error', { code: 'server_error', message: 'upstream broke mid-answer', param: null });
              res.end();
              return;
            }
            event('response.output_text.delta', { item_id: 'msg_test', output_index: 0, content_index: 0, delta: chunks[i] });
            rec.chunksSent++;
          }
          event('response.output_text.done', { item_id: 'msg_test', output_index: 0, content_index: 0, text });
          event('response.completed', { response: response('completed', [...items, message], usage) });
          res.end();
          return;
        }
        case 'custom':
          await b.handle(req, res, rec);
          return;
        case 'stream': {
          const chunks = b.chunks ?? ['Hello', ' from', ' the', ' test', ' upstream', '.'];
          const id = 'chatcmpl-test-stream';
          const m = b.model ?? model;
          const event = (choices: unknown[], extra: Record<string, unknown> = {}) =>
            `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model: m, choices, ...extra })}\n\n`;
          res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
          res.flushHeaders();
          const write = (s: string) => {
            if (!res.destroyed) res.write(s);
          };
          write(event([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]));
          for (let i = 0; i < chunks.length; i++) {
            if (b.resetAfter !== undefined && i === b.resetAfter) {
              await sleep(10); // let the written chunks leave before the reset
              req.socket.resetAndDestroy();
              return;
            }
            if (b.delayMs) await sleep(b.delayMs);
            if (res.destroyed) return;
            write(event([{ index: 0, delta: { content: chunks[i] }, finish_reason: null }]));
            rec.chunksSent++;
          }
          if (b.resetAfter !== undefined && b.resetAfter >= chunks.length) {
            await sleep(10);
            req.socket.resetAndDestroy();
            return;
          }
          if (res.destroyed) return;
          write(event([{ index: 0, delta: {}, finish_reason: 'stop' }]));
          const opts = rec.body?.stream_options as { include_usage?: unknown } | undefined;
          if ((b.usage ?? true) && opts?.include_usage === true) {
            const u = b.usageCounts ?? { prompt_tokens: 11, completion_tokens: chunks.length };
            write(event([], { usage: { ...u, total_tokens: u.prompt_tokens + u.completion_tokens } }));
          }
          if (b.done ?? true) write('data: [DONE]\n\n');
          res.end();
          return;
        }
      }
    } catch {
      if (!res.destroyed) res.destroy();
    }
  }

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;

  return {
    url: `${origin}/v1`,
    origin,
    requests,
    setBehavior: (b) => void (behavior = b),
    waitForRequests: (n) => (requests.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }))),
    async close() {
      const closing = new Promise<void>((r) => server.close(() => r()));
      for (const s of sockets) s.destroy();
      server.closeAllConnections();
      await closing;
    },
  };
}
