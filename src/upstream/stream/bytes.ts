/**
 * The one bytes relay (speech's audio, a video's content): the upstream's body streams to the
 * client as it arrives, one read per pull, and what the answer owes its billed call is told
 * through the hooks: a byte went out, the end (which goes out only once `end` resolved: the
 * charge is in), a failure, the client gone.
 */
import type { UpstreamResponse } from '../types.js';

export interface BytesHooks {
  /** A read went out to the client. */
  sent?(): void;
  /** The body ended: resolves when the client may see the end. */
  end?(): Promise<void>;
  /** The body failed mid-way (the client's stream errors with `failure`). */
  failed?(err: unknown): void;
  /** The client went away. */
  cancelled?(): void;
  /** Takes the function that cuts the stream from outside (shutdown). */
  onCut?(cut: (err: Error) => void): void;
  /** What the client's stream errors with when the body fails. @default the upstream's error */
  failure?(err: unknown): Error;
}

/** A body whose reading began before the relay: its iterator, and the read already taken from it (sent first). */
export interface BodyBegun {
  iterator: AsyncIterator<Uint8Array>;
  first: Uint8Array;
}

/** Reads `upstream`'s first chunk: what `relayBytes` then sends first. Null when the body ended with none. */
export async function beginBody(upstream: UpstreamResponse): Promise<BodyBegun | null> {
  const iterator = upstream.body[Symbol.asyncIterator]();
  const next = await iterator.next();
  return next.done ? null : { iterator, first: next.value };
}

export function relayBytes(upstream: UpstreamResponse, hooks: BytesHooks = {}, begun?: BodyBegun): ReadableStream<Uint8Array> {
  const iterator = begun?.iterator ?? upstream.body[Symbol.asyncIterator]();
  let first = begun?.first;
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        hooks.onCut?.((err) => {
          try {
            controller.error(err);
          } catch {
            // Already closed.
          }
        });
      },
      async pull(controller) {
        try {
          if (first) {
            hooks.sent?.();
            controller.enqueue(first);
            first = undefined;
            return;
          }
          const next = await iterator.next();
          if (next.done) {
            await hooks.end?.();
            controller.close();
            return;
          }
          hooks.sent?.();
          controller.enqueue(next.value);
        } catch (err) {
          hooks.failed?.(err);
          controller.error(hooks.failure ? hooks.failure(err) : err);
        }
      },
      cancel() {
        hooks.cancelled?.();
        upstream.discard();
      },
    },
    { highWaterMark: 0 },
  );
}
