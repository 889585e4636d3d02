/**
 * The processes outside the gateway that do a storage driver's work on this machine: the
 * PostgreSQL backends that serve one gateway's connections, and the Redis server.
 *
 * The driver needs them for two reasons. Their CPU is part of what the gateway costs on that
 * storage, so it is reported beside the gateway's own. And it is not "other load": without
 * this, every PostgreSQL or Redis measurement would look disturbed and be taken again.
 */
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import postgres from 'postgres';
import { tcpLocalPortsTo } from './procs.js';

const commOf = (pid: number): string => {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '';
  }
};

/**
 * The PostgreSQL backends serving `gatewayPid`'s connections: the gateway's local ports to the
 * server matched with pg_stat_activity.client_port. Backends of other clients of the same server
 * (tests, other benchmarks) are left out. Empty when the server is not a local process.
 */
export async function postgresBackendPids(url: string, gatewayPid: number): Promise<number[]> {
  const u = new URL(url);
  const ports = tcpLocalPortsTo(gatewayPid, Number(u.port || 5432));
  if (ports.length === 0) return [];
  const sql = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    const rows = await sql<{ pid: number }[]>`SELECT pid FROM pg_stat_activity WHERE client_port = ANY(${ports}::int[])`;
    return rows.map((r) => r.pid).filter((pid) => commOf(pid).startsWith('postgres'));
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/**
 * The Redis server's pid (INFO server), or null when it is not a local process. Redis is one
 * process for every client, so its CPU includes whatever else uses the same server meanwhile.
 */
export async function redisServerPid(url: string): Promise<number | null> {
  const c = new Redis(url, { lazyConnect: true, connectTimeout: 1_500, commandTimeout: 1_500, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  c.on('error', () => {});
  try {
    await c.connect();
    const pid = Number(/^process_id:(\d+)/m.exec(await c.info('server'))?.[1]);
    return Number.isInteger(pid) && commOf(pid).startsWith('redis') ? pid : null;
  } catch {
    return null;
  } finally {
    c.disconnect();
  }
}
