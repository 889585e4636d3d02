/**
 * A loopback upstream with OpenAI's Files and Batch APIs, as OpenAI documents them: upload a
 * JSONL file (multipart, purpose "batch"), create a batch from it, retrieve it (in_progress
 * until `finish()`, or at once with `autoFinish`), cancel it, read its output and error files.
 * A finished batch answers every line as a chat completion (or an embeddings list) with usage
 * prompt 11 / completion 7, and a line whose body names `fail_me` with a 400 in the error file
 * (its message echoes the key the upstream was called with, as providers do about a key), one
 * naming `skip_me` with a line-level error (it never ran) that echoes the key split in two, and one
 * naming `deny_me` with a 403 about the provider account.
 * It also answers a plain `POST /chat/completions` (the lines a gateway runs itself), echoing
 * the last message, lists its batches (`GET /batches`, newest first, paged), can fail the next
 * reads of a file's content with a 500, refuse the next cancels with a 503, and can leave a
 * batch's creation unanswered.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

interface UpBatch {
  id: string;
  status: string;
  input_file_id: string;
  endpoint: string;
  output_file_id: string | null;
  error_file_id: string | null;
  metadata: Record<string, string> | null;
  /** Unix seconds. */
  created_at: number;
  errors?: { object: 'list'; data: unknown[] } | null;
}

export interface BatchUpstream {
  url: string;
  /** Input lines the upstream received, parsed. */
  inputs: Record<string, unknown>[][];
  batches: UpBatch[];
  /** Every request, "METHOD path". */
  calls: string[];
  /** Finishes every batch in progress (answers its lines). */
  finish(): void;
  /** Cancels every batch in progress on the upstream's own account (it answers the first line only). */
  cancelAll(): void;
  /** Fails every batch in progress, with these `errors.data` (none: no errors given). */
  failAll(errors?: { code: string; message: string; line: number | null; param: string | null }[]): void;
  autoFinish: boolean;
  /** How many of the next `GET /files/{id}/content` answer 500 (a transient failure). */
  failContentReads: number;
  /** While set, a file upload is refused with a 401 carrying this message (as a provider echoes a wrong key). */
  refuseUploads: string | null;
  /** While set, a batch is created but the answer to its create never comes (its creator may die first). */
  holdCreates: boolean;
  /** How many of the next listings of its batches answer 500. */
  failLists: number;
  /** How many of the next cancels answer 503 (the batch runs on). */
  failCancels: number;
  /** The bodies of the plain chat completions it answered. */
  chats: Record<string, unknown>[];
  close(): Promise<void>;
}

async function bodyOf(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export async function startBatchUpstream(): Promise<BatchUpstream> {
  const files = new Map<string, string>();
  const inputs: Record<string, unknown>[][] = [];
  const batches: UpBatch[] = [];
  const calls: string[] = [];
  let n = 0;
  const id = (p: string) => `${p}${++n}`;

  /** The key the gateway called with (its bearer token), echoed in refusals. */
  let lastKey = '';
  function complete(b: UpBatch, status: 'completed' | 'cancelled'): void {
    const lines = (files.get(b.input_file_id) ?? '').split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as { custom_id: string; body: Record<string, unknown> });
    // A cancelled batch answered its first line only.
    const ran = status === 'cancelled' ? lines.slice(0, 1) : lines;
    const out: string[] = [];
    const err: string[] = [];
    for (const l of ran) {
      if (JSON.stringify(l.body).includes('fail_me')) {
        const error = { message: `bad request from key ${lastKey}`, type: 'invalid_request_error', code: 'bad_line', param: 'messages' };
        err.push(JSON.stringify({ id: id('batch_req_'), custom_id: l.custom_id, response: { status_code: 400, request_id: id('req_'), body: { error } }, error: null }));
        continue;
      }
      if (JSON.stringify(l.body).includes('deny_me')) {
        const error = { message: 'Your organization is not verified to use this model.', type: 'invalid_request_error', code: 'unverified_organization' };
        err.push(JSON.stringify({ id: id('batch_req_'), custom_id: l.custom_id, response: { status_code: 403, request_id: id('req_'), body: { error } }, error: null }));
        continue;
      }
      if (JSON.stringify(l.body).includes('skip_me')) {
        // The key split in two, as a provider may quote it: only a redaction of its runs finds it.
        err.push(JSON.stringify({ id: id('batch_req_'), custom_id: l.custom_id, response: null, error: { code: 'not_run', message: `skipped for key ${lastKey.slice(0, 12)}|${lastKey.slice(12)}` } }));
        continue;
      }
      const body = b.endpoint === '/v1/embeddings'
        ? { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2] }], model: l.body.model, usage: { prompt_tokens: 11, total_tokens: 11 } }
        : { id: id('chatcmpl-'), object: 'chat.completion', created: 1, model: l.body.model, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } };
      out.push(JSON.stringify({ id: id('batch_req_'), custom_id: l.custom_id, response: { status_code: 200, request_id: id('req_'), body }, error: null }));
    }
    if (out.length) files.set((b.output_file_id = id('file-out')), `${out.join('\n')}\n`);
    if (err.length) files.set((b.error_file_id = id('file-err')), `${err.join('\n')}\n`);
    b.status = status;
  }

  const up: BatchUpstream = {
    url: '',
    inputs,
    batches,
    calls,
    autoFinish: false,
    failContentReads: 0,
    refuseUploads: null,
    holdCreates: false,
    failLists: 0,
    failCancels: 0,
    chats: [],
    finish() {
      for (const b of batches) if (b.status === 'in_progress') complete(b, 'completed');
    },
    cancelAll() {
      for (const b of batches) if (b.status === 'in_progress') complete(b, 'cancelled');
    },
    failAll(errors) {
      for (const b of batches) {
        if (b.status !== 'in_progress') continue;
        b.status = 'failed';
        b.errors = errors ? { object: 'list', data: errors } : null;
      }
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };

  const server: Server = createServer(async (req, res) => {
    const path = (req.url ?? '').replace(/^\/v1/, '');
    calls.push(`${req.method} ${path}`);
    lastKey = (req.headers.authorization ?? '').replace(/^Bearer /, '');
    const body = await bodyOf(req);
    const send = (status: number, v: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(v));
    };
    let m: RegExpExecArray | null;
    if (req.method === 'POST' && path === '/files') {
      if (up.refuseUploads !== null) return send(401, { error: { message: up.refuseUploads, type: 'invalid_request_error', code: 'invalid_api_key' } });
      const form = await new Request('http://x/', { method: 'POST', headers: { 'content-type': req.headers['content-type'] ?? '' }, body: new Uint8Array(body) }).formData();
      const file = form.get('file');
      if (form.get('purpose') !== 'batch' || !(file instanceof Blob)) return send(400, { error: { message: 'bad upload' } });
      const text = await file.text();
      const fid = id('file-');
      files.set(fid, text);
      inputs.push(text.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Record<string, unknown>));
      return send(200, { id: fid, object: 'file', bytes: file.size, created_at: 1, filename: 'x.jsonl', purpose: 'batch', status: 'processed' });
    }
    if ((m = /^\/files\/([^/]+)\/content$/.exec(path)) && req.method === 'GET') {
      if (up.failContentReads > 0) {
        up.failContentReads--;
        return send(500, { error: { message: 'try again' } });
      }
      const text = files.get(decodeURIComponent(m[1]!));
      if (text === undefined) return send(404, { error: { message: 'no such file' } });
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      return res.end(text);
    }
    if (req.method === 'POST' && path === '/chat/completions') {
      const p = JSON.parse(body.toString()) as { model: string; messages: { content: string }[] };
      up.chats.push(p);
      const content = p.messages[p.messages.length - 1]?.content ?? '';
      return send(200, { id: id('chatcmpl-'), object: 'chat.completion', created: 1, model: p.model, choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } });
    }
    if (req.method === 'POST' && path === '/batches') {
      const p = JSON.parse(body.toString()) as { input_file_id: string; endpoint: string; metadata?: Record<string, string> };
      if (!files.has(p.input_file_id)) return send(400, { error: { message: 'no such file' } });
      const b: UpBatch = {
        id: id('batch_up_'),
        status: 'in_progress',
        input_file_id: p.input_file_id,
        endpoint: p.endpoint,
        output_file_id: null,
        error_file_id: null,
        metadata: p.metadata ?? null,
        created_at: Math.floor(Date.now() / 1000),
      };
      batches.push(b);
      if (up.holdCreates) return;
      return send(200, { object: 'batch', ...b });
    }
    if (req.method === 'GET' && path.startsWith('/batches?')) {
      if (up.failLists > 0) {
        up.failLists--;
        return send(500, { error: { message: 'try again' } });
      }
      // Newest first, `limit` a page, `after` the last id of the page before.
      const q = new URLSearchParams(path.slice('/batches?'.length));
      const all = [...batches].reverse();
      const after = q.get('after');
      const from = after === null ? 0 : all.findIndex((x) => x.id === after) + 1;
      const page = all.slice(from, from + Number(q.get('limit') ?? 20));
      return send(200, { object: 'list', data: page.map((x) => ({ object: 'batch', ...x })), has_more: from + page.length < all.length });
    }
    if ((m = /^\/batches\/([^/]+)(\/cancel)?$/.exec(path))) {
      const b = batches.find((x) => x.id === decodeURIComponent(m![1]!));
      if (!b) return send(404, { error: { message: 'no such batch' } });
      if (m[2] && req.method === 'POST') {
        if (up.failCancels > 0) {
          up.failCancels--;
          return send(503, { error: { message: 'try again later' } });
        }
        if (b.status === 'in_progress') complete(b, 'cancelled');
        return send(200, { object: 'batch', ...b });
      }
      if (up.autoFinish && b.status === 'in_progress') complete(b, 'completed');
      return send(200, { object: 'batch', ...b });
    }
    send(404, { error: { message: `no route ${req.method} ${path}` } });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  up.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return up;
}
