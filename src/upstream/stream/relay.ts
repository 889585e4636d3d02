/**
 * The one SSE relay of every streamed endpoint. The endpoint's event reader turns each
 * upstream read into the client's frames, flushed as they arrive; a `: keep-alive` comment
 * goes out while the upstream is silent; a failure after the 200 (the upstream broke off, sent
 * garbage or an error event, or shutdown cut the stream) becomes the reader's error frames: a
 * cut answer never looks like a finished one.
 *
 * Whatever way the stream ends, it is billed once by the one settle rule (`settleStream`):
 * the upstream's usage when it came and is final, else the produced output counted with the
 * tokenizer; the prompt is paid once the upstream answered, and only an upstream that failed
 * before producing anything has its hold released. The answer's last frames (the usage chunk, the end marker) are written
 * only after that charge is in the store: a client holding a whole answer has paid for it.
 */
import { Response } from '@whatwg-node/server';
import { errors } from '../../errors.js';
import { withHeaders } from '../../http/objects.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { UpstreamResponse } from '../types.js';
import { streamBody } from './bodies.js';
import type { EventReader } from './reader.js';
import type { RelayDeps, StreamCall } from './settle.js';
import { StreamRelay } from './stream-relay.js';

export type { StreamCall } from './settle.js';

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  // no-transform: proxies and compression middleware must not buffer the stream.
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
};

export async function relayStream(
  core: RelayDeps,
  ctx: RequestContext,
  res: UpstreamResponse,
  billing: StreamCall,
  reader: EventReader,
  headers: Record<string, string>,
): Promise<Response> {
  // Shutdown's grace ended (and released the call) while the upstream's headers were on their
  // way: the answer, which nobody will pay for, is not relayed.
  if (billing.call.closed) {
    res.discard();
    throw errors.shuttingDown();
  }
  const relay = new StreamRelay(core, ctx, res, billing, reader);
  // What the upstream sent along with its headers is read before the answer starts. A short
  // answer from a fast upstream is often complete by then (its end included): it goes out as
  // one body with a Content-Length, in one write like a plain answer, instead of through a
  // stream, chunked framing and a keep-alive timer. Otherwise the frames read so far (or the
  // failure found in them) open the stream below, and nothing is read twice.
  const complete = await relay.completeOnArrival();
  if (complete) {
    const h = withHeaders({ ...SSE_HEADERS }, headers);
    h['content-length'] = String(complete.byteLength);
    return new Response(complete as Uint8Array<ArrayBuffer>, { status: 200, headers: h });
  }
  const stream = streamBody({
    start: (sink) => relay.start(sink),
    pull: (sink) => relay.pullInto(sink),
    cancel: () => relay.cancel(),
    ended: () => relay.ended,
  });
  return new Response(stream as ReadableStream<Uint8Array>, { status: 200, headers: withHeaders({ ...SSE_HEADERS }, headers) });
}
