/**
 * A streamed answer written straight into node:http's response by the gateway's own bridge:
 * `writeAnswer` hands the response to the body instead of piping it, every frame arrives in
 * order, a write the socket cannot take holds the relay back until 'drain', a client that
 * leaves cancels the relay once, and nothing is written after the end.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { Response } from '@whatwg-node/server';
import { describe, expect, it } from 'vitest';
import { type DirectBody, WRITE_DIRECT, writeAnswer } from '../../src/http/node-lane.js';
import { type Sink, streamBody } from '../../src/upstream/stream/bodies.js';

/** A response that records its writes; `room` writes are taken before one returns false. */
class FakeResponse extends EventEmitter {
  written: string[] = [];
  ended = false;
  destroyed = false;
  closed = false;
  writableEnded = false;
  writableFinished = false;
  room = Number.POSITIVE_INFINITY;
  writeHead(): this {
    return this;
  }
  write(chunk: Uint8Array): boolean {
    if (this.writableEnded) throw new Error('write after end');
    this.written.push(Buffer.from(chunk).toString());
    return --this.room > 0;
  }
  end(): this {
    this.ended = this.writableEnded = this.writableFinished = true;
    setImmediate(() => this.emit('close'));
    return this;
  }
  /** The client goes away. */
  leave(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

/** A relay that gives one frame per pull (as a body read through its iterator does), then ends. */
function source(frames: string[]) {
  let i = 0;
  const state = { pulls: 0, cancels: 0, ended: false, sink: null as Sink | null };
  const body = streamBody({
    start: (sink) => {
      state.sink = sink;
    },
    pull: async (sink) => {
      state.pulls++;
      await new Promise((r) => setImmediate(r));
      if (state.ended) return;
      if (i < frames.length) sink.push(Buffer.from(frames[i++]!));
      else {
        state.ended = true;
        sink.close();
      }
    },
    cancel: () => {
      state.cancels++;
      state.ended = true;
    },
    ended: () => state.ended,
  });
  return { body: body as Readable, state };
}

const req = { socket: null } as unknown as IncomingMessage;
const settle = () => new Promise((r) => setTimeout(r, 20));

/** `frames` answered through writeAnswer into a response that takes `room` writes before refusing one. */
async function answered(frames: string[], room = Number.POSITIVE_INFINITY) {
  const { body, state } = source(frames);
  const res = new FakeResponse();
  res.room = room;
  writeAnswer(req, res as unknown as ServerResponse, new Response(body as unknown as BodyInit, { headers: { 'content-type': 'text/event-stream' } }), null);
  await settle();
  return { body, state, res };
}

describe('a streamed answer written straight into the response', () => {
  it('is handed the response (never piped) and writes every frame in order, then ends', async () => {
    const { body, res } = await answered(['a', 'b', 'c']);
    expect(res.written).toEqual(['a', 'b', 'c']);
    expect(res.ended).toBe(true);
    // Piped, the Readable would be flowing.
    expect(body.readableFlowing).toBe(null);
  });

  it('waits for drain when a write is refused, then goes on', async () => {
    const { state, res } = await answered(['a', 'b', 'c', 'd'], 2);
    expect(res.written).toEqual(['a', 'b']);
    const pulls = state.pulls;
    await settle();
    expect(state.pulls).toBe(pulls);
    res.room = Number.POSITIVE_INFINITY;
    res.emit('drain');
    await settle();
    expect(res.written).toEqual(['a', 'b', 'c', 'd']);
    expect(res.ended).toBe(true);
  });

  it('cancels the relay once when the client leaves, and writes nothing after', async () => {
    const { state, res } = await answered(['a', 'b', 'c', 'd'], 1);
    res.leave();
    expect(state.cancels).toBe(1);
    // A keep-alive or a late frame after the client left is dropped.
    expect(state.sink?.push(Buffer.from('late'))).toBe(false);
    res.emit('drain');
    await settle();
    expect(res.written).toEqual(['a']);
    expect(state.cancels).toBe(1);
  });

  it('refuses a body already read from elsewhere (which is then piped as before)', async () => {
    const { body } = source(['a']);
    body.read();
    await settle();
    const res = new FakeResponse();
    expect((body as unknown as DirectBody)[WRITE_DIRECT](res as unknown as ServerResponse)).toBe(false);
    expect(res.written).toEqual([]);
  });
});
