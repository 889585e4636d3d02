/**
 * The sockets the PostgreSQL client talks over, with a client-side watchdog. A server that
 * stops answering (paused, partitioned, stalled on its disk) enforces nothing itself, not even
 * `statement_timeout`: without a watchdog a connection waits on it for ever and the pool fills
 * with such connections. So a socket that has sent something and heard nothing back for
 * a set time is destroyed: the client fails what was on it and opens a fresh connection for the
 * next statement, and service resumes by itself once the server answers again.
 */
import { Socket } from 'node:net';

/** What the `postgres` package passes to its `socket` option (the parts used here). */
interface SocketTarget {
  host: string[];
  port: number[];
  path?: string | false;
}

/**
 * A `socket` option for the `postgres` package: connects (within `silence.ms`) to one of the
 * configured hosts in turn, or the Unix socket path, and watches the connection as above.
 */
export function watchedSockets(silence: { ms: number }): (target: SocketTarget) => Promise<Socket> {
  let next = 0;
  return (target) => {
    const socket = new Socket();
    const index = next++ % Math.max(1, target.host.length);
    const host = target.host[index] ?? '127.0.0.1';
    watch(socket, silence);
    return new Promise<Socket>((resolve, reject) => {
      const failed = (err: Error) => reject(err);
      socket.once('error', failed);
      socket.once('connect', () => {
        socket.off('error', failed);
        // The client's TLS upgrade reads the host name from here (for the server name check).
        Object.assign(socket, { host });
        resolve(socket);
      });
      if (target.path) socket.connect(target.path);
      else socket.connect(target.port[index] ?? 5432, host);
    });
  };
}

/**
 * Destroys `socket` when it waited `silence.ms` (read at each wait) for an answer: from the
 * connection attempt, or from the first write not yet followed by any byte from the server.
 * An idle connection (all answered) is never timed out here; the pool's idle timeout closes it.
 */
function watch(socket: Socket, silence: { ms: number }): void {
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    const ms = silence.ms;
    timer ??= setTimeout(() => socket.destroy(new Error(`PostgreSQL did not answer within ${ms} ms`)), ms);
  };
  const disarm = () => {
    clearTimeout(timer);
    timer = undefined;
  };
  arm();
  socket.on('data', disarm);
  socket.once('close', disarm);
  // Wrapped once connected: connect() puts the prototype's write back on the socket.
  socket.once('connect', () => {
    disarm();
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    socket.write = ((...args: unknown[]) => {
      if (!socket.destroyed) arm();
      return write(...args);
    }) as Socket['write'];
  });
}
