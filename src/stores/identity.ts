/**
 * A store's identity: a short digest of where its books are (host, port, database, schema or
 * key prefix, file), however its URL is spelled, without credentials or options. Settle journal files carry it, so a gateway
 * sharing a journal folder with gateways of other stores never replays their charges into its
 * own books.
 */
import { createHash, randomBytes } from 'node:crypto';
import { resolve } from 'node:path';

/** A URL without its credentials (and without query parameters that carry secrets). */
export function place(url: string): string {
  try {
    const u = new URL(url);
    const params = [...u.searchParams].filter(([k]) => !/pass|secret|token/i.test(k)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `${u.protocol}//${u.host}${u.pathname}${params.length ? `?${new URLSearchParams(params)}` : ''}`;
  } catch {
    return url;
  }
}

const digest = (value: unknown) => createHash('sha256').update(JSON.stringify(value)).digest('hex').slice(0, 16);

/**
 * Where a Redis URL points, however it is spelled: host (lower case), port (6379 when none)
 * and database (its path or `?db=`, 0 when none); credentials and options left out.
 */
export function redisWhere(url: string): string {
  try {
    const u = new URL(url);
    const db = Number(u.pathname.replace(/^\/+/, '') || u.searchParams.get('db') || 0);
    return `${u.hostname.toLowerCase()}:${u.port || 6379}/${db}`;
  } catch {
    return url;
  }
}

/**
 * Where a PostgreSQL URL points, however it is spelled: host and port (5432 when none, either
 * may come as a parameter) and database (the user's name when none, as PostgreSQL does).
 */
export function postgresWhere(url: string): string {
  try {
    const u = new URL(url);
    const host = (u.searchParams.get('host') ?? u.hostname).toLowerCase();
    const port = u.searchParams.get('port') ?? (u.port || '5432');
    const db = decodeURIComponent(u.pathname.replace(/^\/+/, '')) || u.searchParams.get('dbname') || decodeURIComponent(u.username) || 'postgres';
    return `${host}:${port}/${db}`;
  } catch {
    return url;
  }
}

/** `host:port` of a node given as a URL, `host[:port]` or `{host, port}` (`port`: its default, 26379 for a Sentinel). */
export function nodeWhere(node: string | { host?: string; port?: number }, port = 6379): string {
  if (typeof node !== 'string') return `${(node.host ?? '127.0.0.1').toLowerCase()}:${node.port ?? port}`;
  try {
    const u = new URL(node.includes('://') ? node : `redis://${node}`);
    return `${u.hostname.toLowerCase()}:${u.port || port}`;
  } catch {
    return node;
  }
}

/** A Redis store: one server (`url`), a Cluster (its nodes) or a Sentinel set (its sentinels and master name), and the key prefix. */
export const redisIdentity = (where: { url?: string; nodes?: string[]; sentinels?: string[]; name?: string; keyPrefix: string }): string =>
  `redis:${digest({
    url: where.url === undefined ? null : redisWhere(where.url),
    nodes: where.nodes ? [...where.nodes].sort() : null,
    sentinels: where.sentinels ? [...where.sentinels].sort() : null,
    name: where.name ?? null,
    keyPrefix: where.keyPrefix,
  })}`;

export const postgresIdentity = (url: string, schema: string): string => `postgres:${digest({ where: postgresWhere(url), schema })}`;

export const sqliteIdentity = (path: string): string => `sqlite:${digest(resolve(path))}`;

/** Memory books live and die with their process: no other gateway's journal is theirs. */
export const memoryIdentity = (): string => `memory:${randomBytes(8).toString('hex')}`;
