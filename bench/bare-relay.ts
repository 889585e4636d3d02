/**
 * The baseline: the least a Node relay does for an OpenAI-compatible call. node:http in,
 * an undici Pool out (the same client and pool size the gateway uses), the request JSON
 * parsed and re-serialised once, a plain answer parsed and re-serialised once, a stream
 * piped through untouched. No auth, no limits, no money, no validation.
 *
 * It is the floor any Node relay stands on: the gateway's numbers are read against it.
 *
 * node --import tsx bench/bare-relay.ts --upstream http://127.0.0.1:PORT [--port 0] [--connections 256]
 * Every POST path is forwarded to the same path on the upstream origin.
 * Prints "bare relay listening on http://127.0.0.1:PORT" when ready.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { pipeline } from 'node:stream';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({
  options: {
    upstream: { type: 'string' },
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
    connections: { type: 'string', default: '256' },
  },
});
if (!values.upstream) throw new Error('--upstream URL is required');
const origin = new URL(values.upstream).origin;
const pool = new Pool(origin, {
  connections: Number(values.connections),
  keepAliveTimeout: 30_000,
  headersTimeout: 120_000,
  bodyTimeout: 120_000,
});

function fail(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message } }));
}

async function relay(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const parts: Buffer[] = [];
  for await (const b of req) parts.push(b as Buffer);
  let body: { stream?: unknown };
  try {
    body = JSON.parse(Buffer.concat(parts).toString()) as { stream?: unknown };
  } catch {
    return fail(res, 400, 'invalid JSON');
  }
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort();
  });
  const up = await pool.request({
    origin,
    path: req.url ?? '/',
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: '*/*' },
    body: JSON.stringify(body),
    signal: abort.signal,
  });
  const type = up.headers['content-type'];
  if (body.stream === true && up.statusCode === 200) {
    res.writeHead(200, { 'content-type': typeof type === 'string' ? type : 'text/event-stream', 'cache-control': 'no-cache' });
    pipeline(up.body, res, () => undefined);
    return;
  }
  const answer = JSON.parse(await up.body.text()) as unknown;
  res.writeHead(up.statusCode, { 'content-type': 'application/json' });
  res.end(JSON.stringify(answer));
}

const server = createServer((req, res) => {
  if (req.method !== 'POST') return fail(res, 404, 'not found');
  relay(req, res).catch((err: unknown) => fail(res, 502, err instanceof Error ? err.message : String(err)));
});
server.keepAliveTimeout = 65_000;

server.listen(Number(values.port), values.host, () => {
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  process.stdout.write(`bare relay listening on http://${values.host}:${port}\n`);
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  void pool.close().finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
