/**
 * The two ways a streamed answer's body is built. On Node the server adapter's own Response
 * takes a Node Readable and pipes it straight into the socket (a web ReadableStream would first
 * be wrapped into one, chunk by chunk). Elsewhere (Bun, Next.js edge) Response is the runtime's
 * and takes a web ReadableStream, pulled one upstream read at a time.
 */
import { Readable } from 'node:stream';
import { Response } from '@whatwg-node/server';

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
