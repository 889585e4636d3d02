/**
 * The benchmark's upstream: a minimal OpenAI-compatible server on loopback, as cheap as
 * node:http allows, so the CPU it takes from the shared cores is small and the same for
 * both targets. Answers are prebuilt buffers (bench/fixtures.ts).
 *
 *   POST /v1/chat/completions        fast: a fixed chat.completion with usage or, when the
 *                                    body has "stream":true, 20 SSE chunks + a usage chunk +
 *                                    [DONE]: one write by default (--writes single, as a fast
 *                                    provider's answer arrives: one TCP read for the relay), or
 *                                    22 writes back to back with --writes chunked. A user
 *                                    message starting with [paced] gets the same 22 events one
 *                                    per write, --pace-ms apart (default 2), as a model
 *                                    streaming tokens sends them, each due --pace-ms after the
 *                                    one before on the answer's own clock. [paired]: two
 *                                    events per write, each pair when its second event would
 *                                    be due (so it ends when a paced answer does).
 *                                    Asked for the model bench/chat, it answers with that
 *                                    name; asked for any other (the real shape's alias or its
 *                                    upstream name), with its own dated name, as a provider
 *                                    does. The usage chunk is written whether asked for or not.
 *   POST /slow/v1/chat/completions   held: SSE headers and a first chunk at once, then one
 *                                    chunk every --tick-ms until POST /__release (or
 *                                    --max-hold-ms), then finish + usage + [DONE].
 *   GET  /__held                     {"open": <held streams now>}
 *   POST /__release                  ends every held stream.
 *
 * node --import tsx bench/upstream.ts [--port 0] [--tick-ms 1000] [--max-hold-ms 120000] [--writes single|chunked] [--pace-ms 2]
 * Prints "upstream listening on http://127.0.0.1:PORT" when ready.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { parseArgs } from 'node:util';
import { ALIAS_SERVED_AS, type Answers, answersNaming, DONE, HELD_FIRST, HELD_LAST, MODEL, PACE_MS, PACED_MARK, PAIRED_MARK, TICK_EVENT } from './fixtures.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
    'tick-ms': { type: 'string', default: '1000' },
    'max-hold-ms': { type: 'string', default: '120000' },
    writes: { type: 'string', default: 'single' },
    'pace-ms': { type: 'string', default: String(PACE_MS) },
  },
});
const TICK_MS = Number(values['tick-ms']);
const MAX_HOLD_MS = Number(values['max-hold-ms']);
const SINGLE_WRITE = values.writes !== 'chunked';
const PACED_MS = Number(values['pace-ms']);
const PACED_AT = `"content":"${PACED_MARK}`;
const PAIRED_AT = `"content":"${PAIRED_MARK}`;

/** One model name's answers, laid out for each way of writing them. */
interface Writes {
  plain: Buffer;
  plainHeaders: Record<string, string>;
  /** The whole streamed answer as one buffer, for the single-write variant. */
  all: Buffer;
  /** The streamed answer's events, one write each for the paced and chunked variants. */
  events: Buffer[];
  /** The same events two per write, for the paired variant. */
  pairs: Buffer[];
}
function writesOf(a: Answers): Writes {
  const events = [...a.events, a.usage, DONE];
  return {
    plain: a.plain,
    plainHeaders: { 'content-type': 'application/json', 'content-length': String(a.plain.length) },
    all: Buffer.concat(events),
    events,
    pairs: Array.from({ length: events.length / 2 }, (_, j) => Buffer.concat(events.slice(2 * j, 2 * j + 2))),
  };
}
/** The kind shape's answers (the listed name) and the real shape's (the upstream's dated name). */
const LISTED = writesOf(answersNaming(MODEL));
const DATED = writesOf(answersNaming(ALIAS_SERVED_AS));
// Both relays re-serialise the body with JSON.stringify, so the field has no spaces.
const LISTED_AT = `"model":"${MODEL}"`;

/**
 * Event i of a paced answer goes out PACED_MS * i after the first, on a clock of its own (a
 * late timer does not delay the rest); a pair goes out when its second event would have. A
 * paced and a paired answer so end at the same time. Stops when the client goes.
 */
function paced(res: ServerResponse, w: Writes, paired = false): void {
  const writes = paired ? w.pairs : w.events;
  const start = performance.now();
  let i = 0;
  let timer: NodeJS.Timeout | undefined;
  const next = () => {
    const e = writes[i++]!;
    if (i === writes.length) return void res.end(e);
    res.write(e);
    timer = setTimeout(next, Math.max(0, dueOf(i) - performance.now()));
  };
  /** When write k goes out. */
  const dueOf = (k: number) => start + PACED_MS * (paired ? 2 * k + 1 : k);
  res.on('close', () => clearTimeout(timer));
  if (paired) timer = setTimeout(next, PACED_MS);
  else next();
}

const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' };

/** Held streams and how to end each. */
const held = new Map<ServerResponse, () => void>();

function readBody(req: IncomingMessage, done: (body: string) => void): void {
  const parts: Buffer[] = [];
  req.on('data', (b: Buffer) => parts.push(b));
  req.on('end', () => done(parts.length === 1 ? parts[0]!.toString() : Buffer.concat(parts).toString()));
}

function fast(body: string, res: ServerResponse): void {
  const w = body.includes(LISTED_AT) ? LISTED : DATED;
  // Both relays re-serialise the body with JSON.stringify, so the flag has no spaces.
  if (!body.includes('"stream":true')) {
    res.writeHead(200, w.plainHeaders);
    res.end(w.plain);
    return;
  }
  res.writeHead(200, SSE_HEADERS);
  if (body.includes(PACED_AT)) {
    paced(res, w);
    return;
  }
  if (body.includes(PAIRED_AT)) {
    paced(res, w, true);
    return;
  }
  if (SINGLE_WRITE) {
    res.end(w.all);
    return;
  }
  for (const e of w.events.slice(0, -1)) res.write(e);
  res.end(DONE);
}

function hold(res: ServerResponse): void {
  res.writeHead(200, SSE_HEADERS);
  res.write(HELD_FIRST);
  const tick = setInterval(() => res.write(TICK_EVENT), TICK_MS);
  const stop = () => {
    clearInterval(tick);
    clearTimeout(limit);
    return held.delete(res);
  };
  const finish = () => {
    if (stop()) res.end(HELD_LAST);
  };
  const limit = setTimeout(finish, MAX_HOLD_MS);
  held.set(res, finish);
  res.on('close', stop);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
}

const server = createServer((req, res) => {
  const url = req.url ?? '/';
  if (req.method === 'POST' && url === '/v1/chat/completions') return readBody(req, (b) => fast(b, res));
  if (req.method === 'POST' && url === '/slow/v1/chat/completions') return readBody(req, () => hold(res));
  if (url === '/__held') return sendJson(res, 200, { open: held.size });
  if (req.method === 'POST' && url === '/__release') {
    const n = held.size;
    for (const finish of [...held.values()]) finish();
    return sendJson(res, 200, { released: n });
  }
  sendJson(res, 404, { error: { message: `no route ${req.method} ${url}` } });
});
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;

server.listen(Number(values.port), values.host, 1024, () => {
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  process.stdout.write(`upstream listening on http://${values.host}:${port}\n`);
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
