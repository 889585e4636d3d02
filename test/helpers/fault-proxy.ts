/**
 * A small TCP proxy (node:net on 127.0.0.1) to put between the gateway and a test upstream,
 * injecting transport faults the upstream itself cannot produce on its own:
 *
 *   const proxy = await startFaultProxy(up.origin);
 *   proxy.setMode({ kind: 'slice' });       // every upstream->gateway write in 1-byte pieces
 *   ... configure the gateway's upstream baseUrl as `${proxy.origin}/v1` ...
 *
 * Modes (a connection takes the mode current when it is accepted; `await setMode(...)` closes
 * the open connections and lets the close reach the gateway's pool, so a pooled keep-alive
 * connection never carries the previous mode over, nor is reused half-closed):
 *   pass                       forward as is
 *   latency  {ms}              wait `ms` before forwarding each upstream->gateway chunk
 *   delay    {ms}              a link with a propagation delay, both ways: every chunk is
 *                              forwarded `ms` after it arrived (in order; the waits do not add
 *                              up as `latency`'s do under load). Bytes not yet forwarded when
 *                              the gateway side closes are dropped: like a write its process
 *                              had not sent yet when it died, they never arrive
 *   hang                       accept, never connect upstream, never answer
 *   reset    {after}           forward `after` upstream->gateway bytes, then RST the gateway side
 *   slice                      forward upstream->gateway bytes one byte per write
 *   truncate {after}           forward `after` upstream->gateway bytes, then a clean FIN
 *   trickle  {bytes, everyMs, from?}  a slow body: `bytes` bytes every `everyMs` ms (from the
 *                              cut `from` on, when given; before it, as is)
 *   refuse                     accept, then reset at once (a connection failure)
 *
 * `after` is a byte count, or `{ marker, offset? }`: the position just past the first
 * occurrence of `marker` in the upstream->gateway bytes (plus `offset`), which keeps tests
 * independent of header lengths.
 *
 * `stopListening()` closes the port (connections are then refused) and `listen()` opens the
 * same port again, for circuit-breaker tests.
 *
 * `pause()` stalls the link as a paused server (SIGSTOP), a partition or a stalled disk looks:
 * connections open and new ones are still accepted, but nothing is forwarded either way (the
 * bytes wait in the socket buffers); `resume()` lets them all flow again, in order. Unlike
 * `setMode`, it keeps the open connections (a pool's idle ones are what a stall catches).
 * `resume({ keepStalled: true })` lets new connections through but leaves the ones open
 * during the pause stalled for good, as a failover or a lost NAT entry black-holes them.
 */
import { once } from 'node:events';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';

export type Cut = number | { marker: string; offset?: number };

export type FaultMode =
  | { kind: 'pass' }
  | { kind: 'latency'; ms: number }
  | { kind: 'delay'; ms: number }
  | { kind: 'hang' }
  | { kind: 'reset'; after: Cut }
  | { kind: 'slice' }
  | { kind: 'truncate'; after: Cut }
  | { kind: 'trickle'; bytes: number; everyMs: number; from?: Cut }
  | { kind: 'refuse' };

export interface ProxiedConnection {
  mode: FaultMode['kind'];
  /** Bytes the upstream sent towards the gateway (all of them, forwarded or not). */
  fromUpstream: Buffer[];
  /** Bytes written to the gateway, and in how many writes. */
  forwardedBytes: number;
  writes: number;
  /** Largest single write to the gateway. */
  maxWrite: number;
  /** How the gateway side ended: by the fault, or normally. */
  ended: 'open' | 'reset' | 'truncated' | 'closed';
}

export interface FaultProxy {
  /** http://127.0.0.1:PORT */
  origin: string;
  port: number;
  setMode(mode: FaultMode): Promise<void>;
  connections: ProxiedConnection[];
  /** Concatenated upstream->gateway bytes of a connection (default: the last one). */
  captured(index?: number): Buffer;
  /** Closes the listening port and every connection: new connections are refused. */
  stopListening(): Promise<void>;
  /** Listens again on the same port. */
  listen(): Promise<void>;
  /** Stops forwarding on every connection, open or new, without closing any. */
  pause(): void;
  /** Forwards again what waited and what follows (with keepStalled: on new connections only). */
  resume(options?: { keepStalled?: boolean }): void;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const tick = () => new Promise<void>((r) => setImmediate(r));

function cutPosition(cut: Cut, seen: Buffer): number | null {
  if (typeof cut === 'number') return cut;
  const at = seen.indexOf(cut.marker);
  return at === -1 ? null : at + Buffer.byteLength(cut.marker) + (cut.offset ?? 0);
}

/**
 * `delay` mode: each way, every chunk goes `ms` after it arrived, in order. When either side
 * closes, both are destroyed and whatever was still waiting is dropped.
 */
function delayed(client: Socket, upstream: Socket, ms: number, rec: ProxiedConnection): void {
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    rec.ended = 'closed';
    client.destroy();
    upstream.destroy();
  };
  const pipe = (from: Socket, to: Socket, onChunk: (chunk: Buffer) => void) => {
    const queue: Array<{ chunk: Buffer; due: number }> = [];
    let pumping = false;
    let ended = false;
    const pump = async () => {
      if (pumping) return;
      pumping = true;
      while (queue.length && !closed) {
        const wait = queue[0]!.due - performance.now();
        if (wait > 0) await sleep(wait);
        if (closed) return;
        const { chunk } = queue.shift()!;
        onChunk(chunk);
        to.write(chunk);
      }
      pumping = false;
      if (ended && !closed) to.end();
    };
    from.on('data', (chunk: Buffer) => {
      queue.push({ chunk, due: performance.now() + ms });
      void pump();
    });
    from.on('end', () => {
      ended = true;
      void pump();
    });
  };
  pipe(client, upstream, () => undefined);
  pipe(upstream, client, (chunk) => {
    rec.fromUpstream.push(chunk);
    rec.forwardedBytes += chunk.length;
    rec.writes++;
    rec.maxWrite = Math.max(rec.maxWrite, chunk.length);
  });
  client.on('close', close);
  upstream.on('close', close);
  upstream.on('error', close);
}

/** `target`: the upstream's origin, e.g. http://127.0.0.1:43121 (a path is ignored). */
export async function startFaultProxy(target: string, initial: FaultMode = { kind: 'pass' }): Promise<FaultProxy> {
  const { hostname, port: targetPort } = new URL(target);
  let mode: FaultMode = initial;
  const connections: ProxiedConnection[] = [];
  const live = new Set<Socket>();
  let server: Server | null = null;
  let port = 0;
  let paused = false;
  /** Sockets not forwarding: those open during a pause, until it ends (if it does for them). */
  const stalled = new Set<Socket>();
  const stall = (s: Socket) => {
    stalled.add(s);
    s.pause();
  };

  function onConnection(client: Socket) {
    if (paused) stall(client);
    const m = mode;
    const rec: ProxiedConnection = { mode: m.kind, fromUpstream: [], forwardedBytes: 0, writes: 0, maxWrite: 0, ended: 'open' };
    connections.push(rec);
    live.add(client);
    client.setNoDelay(true);
    client.on('close', () => {
      live.delete(client);
      stalled.delete(client);
    });
    client.on('error', () => undefined);

    if (m.kind === 'refuse') {
      client.resetAndDestroy();
      rec.ended = 'reset';
      return;
    }
    if (m.kind === 'hang') {
      // Read (and drop) what the gateway sends; never answer.
      client.resume();
      return;
    }

    const upstream = connect({ host: hostname, port: Number(targetPort), noDelay: true });
    if (paused) stall(upstream);
    live.add(upstream);
    upstream.on('close', () => {
      live.delete(upstream);
      stalled.delete(upstream);
    });
    if (m.kind === 'delay') {
      delayed(client, upstream, m.ms, rec);
      return;
    }
    upstream.on('error', () => client.destroy());
    client.on('close', () => {
      // The gateway went away: stop pumping (a trickle may have long sleeps ahead).
      done = true;
      upstream.destroy();
    });
    client.pipe(upstream);

    // upstream -> gateway goes through one serial pump that applies the fault.
    const queue: Buffer[] = [];
    let upstreamEnded = false;
    let pumping = false;
    let done = false;
    let seen = Buffer.alloc(0);

    const write = async (piece: Buffer) => {
      if (done || client.destroyed || !client.writable) return;
      rec.forwardedBytes += piece.length;
      rec.writes++;
      rec.maxWrite = Math.max(rec.maxWrite, piece.length);
      if (!client.write(piece)) await Promise.race([once(client, 'drain'), once(client, 'close')]);
    };

    const finish = (how: ProxiedConnection['ended']) => {
      if (done) return;
      done = true;
      rec.ended = how;
      upstream.destroy();
      if (how === 'reset') client.resetAndDestroy();
      else client.end();
    };

    const forward = async (chunk: Buffer) => {
      switch (m.kind) {
        case 'pass':
          return write(chunk);
        case 'latency':
          await sleep(m.ms);
          return write(chunk);
        case 'slice':
          for (let i = 0; i < chunk.length && !done; i++) {
            await write(chunk.subarray(i, i + 1));
            // One byte per event-loop turn, so the gateway reads them one by one.
            await tick();
          }
          return;
        case 'trickle': {
          let start = 0;
          if (m.from !== undefined) {
            const before = seen.length;
            seen = Buffer.concat([seen, chunk]);
            const cut = cutPosition(m.from, seen);
            if (cut === null || cut >= seen.length) return write(chunk);
            if (cut > before) {
              start = cut - before;
              await write(chunk.subarray(0, start));
            }
          }
          for (let i = start; i < chunk.length && !done; i += m.bytes) {
            await sleep(m.everyMs);
            await write(chunk.subarray(i, i + m.bytes));
          }
          return;
        }
        case 'reset':
        case 'truncate': {
          // Where to cut, counted over everything the upstream sent so far.
          const before = seen.length;
          seen = Buffer.concat([seen, chunk]);
          const cut = cutPosition(m.after, seen);
          if (cut === null || cut >= seen.length) return write(chunk);
          if (cut > before) await write(chunk.subarray(0, cut - before));
          finish(m.kind === 'reset' ? 'reset' : 'truncated');
          return;
        }
      }
    };

    const pump = async () => {
      if (pumping) return;
      pumping = true;
      try {
        while (queue.length && !done) {
          // Paused: what was already read waits here too.
          while (stalled.has(upstream) && !done) await sleep(10);
          await forward(queue.shift()!);
          if (queue.length < 16 && !stalled.has(upstream)) upstream.resume();
        }
        if (upstreamEnded && !done && queue.length === 0) finish('closed');
      } finally {
        pumping = false;
      }
    };

    upstream.on('data', (chunk: Buffer) => {
      rec.fromUpstream.push(chunk);
      queue.push(chunk);
      if (queue.length >= 16) upstream.pause();
      void pump();
    });
    upstream.on('end', () => {
      upstreamEnded = true;
      void pump();
    });
  }

  async function listen(): Promise<void> {
    const s = createServer(onConnection);
    s.listen(port, '127.0.0.1');
    await once(s, 'listening');
    port = (s.address() as AddressInfo).port;
    server = s;
  }

  function dropConnections() {
    for (const s of live) s.destroy();
    live.clear();
  }

  async function stopListening(): Promise<void> {
    const s = server;
    server = null;
    const hadConnections = live.size > 0;
    dropConnections();
    if (s) await new Promise<void>((r) => s.close(() => r()));
    if (hadConnections) await sleep(30);
  }

  await listen();

  return {
    get origin() {
      return `http://127.0.0.1:${port}`;
    },
    get port() {
      return port;
    },
    async setMode(next) {
      mode = next;
      if (live.size === 0) return;
      dropConnections();
      // Let the FIN reach the other end's pool before the next request picks a connection.
      await sleep(30);
    },
    connections,
    captured(index = connections.length - 1) {
      return Buffer.concat(connections[index]?.fromUpstream ?? []);
    },
    stopListening,
    listen,
    pause() {
      paused = true;
      for (const s of live) stall(s);
    },
    resume({ keepStalled = false } = {}) {
      paused = false;
      if (keepStalled) return;
      for (const s of stalled) s.resume();
      stalled.clear();
    },
    close: stopListening,
  };
}
