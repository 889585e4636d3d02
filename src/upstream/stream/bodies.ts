/**
 * The ways a streamed answer's body is built. On Node the server adapter's own Response takes
 * a Node Readable and pipes it into the socket (a web ReadableStream would first be wrapped
 * into one, chunk by chunk); the gateway's own node:http bridge goes further and has the relay
 * write each read straight into the response (`writeInto`), with no stream in between.
 * Elsewhere (Bun, Next.js edge) Response is the runtime's and takes a web ReadableStream,
 * pulled one upstream read at a time.
 */
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { Response } from '@whatwg-node/server';
import { type DirectBody, WRITE_DIRECT } from '../../http/node-lane.js';

/** Whether answers are built with the server adapter's own Response (Node). */
const NODE_BODIES = Response !== globalThis.Response;

/** Where the relay writes: a web ReadableStream's controller, or a Node Readable. */
export interface Sink {
  /** False when the client has enough buffered: write more only after its next pull. */
  push(chunk: Uint8Array): boolean;
  close(): void;
}

export interface BodySource {
  /** Called once, before the first pull, with the sink that keep-alives write to. */
  start(sink: Sink): void;
  /** The client wants more: write something or close; never throws. */
  pull(sink: Sink): Promise<void>;
  /** The client went away. */
  cancel(): void;
  /** Whether the answer already ended (a Node stream destroyed then cancels nothing). */
  ended(): boolean;
}

export function streamBody(source: BodySource): ReadableStream<Uint8Array> | Readable {
  if (NODE_BODIES) {
    const readable = new Readable({
      read() {
        void source.pull(sink);
      },
      destroy(err, callback) {
        if (!source.ended()) source.cancel();
        callback(err);
      },
    });
    const sink: Sink = { push: (chunk) => readable.push(chunk), close: () => void readable.push(null) };
    source.start(sink);
    // The relay keeps this sink: pointing its two methods at the response redirects every
    // write, keep-alives included. Nothing is pushed before the body is first read.
    (readable as Readable & DirectBody)[WRITE_DIRECT] = (res) => {
      if (readable.readableFlowing !== null || readable.readableDidRead || readable.readableEnded || readable.readableLength > 0 || readable.destroyed) return false;
      writeInto(res, source, sink);
      return true;
    };
    return readable;
  }
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        source.start(webSink(controller));
      },
      pull: (controller) => source.pull(webSink(controller)),
      cancel: () => source.cancel(),
    },
    { highWaterMark: 0 },
  );
}

function webSink(controller: ReadableStreamDefaultController<Uint8Array>): Sink {
  return {
    push(chunk) {
      controller.enqueue(chunk);
      return (controller.desiredSize ?? 0) > 0;
    },
    close: () => controller.close(),
  };
}

/**
 * Has `source` write straight into `res` through `sink`: a write the socket cannot take yet
 * (false) holds the relay back until 'drain'; the response closing before its end is the
 * client leaving. The relay is pulled again after a pull that wrote and was not held back (a
 * body read through its iterator gives one read per pull); a listened body writes as its
 * reads come and is only resumed on 'drain'.
 */
function writeInto(res: ServerResponse, source: BodySource, sink: Sink): void {
  let closed = false;
  let wrote = false;
  let held = false;
  let pulling = false;
  let again = false;
  sink.push = (chunk) => {
    // After the end (or the client left) a write would only raise an error on the response.
    if (closed || res.destroyed || res.writableEnded) return false;
    wrote = true;
    held = !res.write(chunk);
    return !held;
  };
  sink.close = () => {
    if (closed) return;
    closed = true;
    if (!res.destroyed) res.end();
  };
  const pull = (): void => {
    if (pulling) {
      again = true;
      return;
    }
    pulling = true;
    wrote = false;
    source.pull(sink).then(pulled, pulled);
  };
  const pulled = (): void => {
    pulling = false;
    if (closed || res.destroyed) return;
    if (again || (wrote && !held)) {
      again = false;
      pull();
    }
  };
  // A response fails only through its socket, which the server and 'close' handle already:
  // unheard, an 'error' would end the process.
  res.on('error', () => undefined);
  res.on('drain', () => {
    held = false;
    pull();
  });
  res.once('close', () => {
    const early = !closed || !res.writableFinished;
    closed = true;
    if (early && !source.ended()) source.cancel();
  });
  pull();
}
