/**
 * A store's identity: a short digest of where its books are (host, database, schema or key
 * prefix, file), without credentials or timeouts. Settle journal files carry it, so a gateway
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

export const redisIdentity = (where: { url?: string; nodes?: string[]; sentinels?: string[]; name?: string; keyPrefix: string }): string =>
  `redis:${digest({
    url: where.url === undefined ? null : place(where.url),
    nodes: where.nodes?.map(place).sort() ?? null,
    sentinels: where.sentinels?.map(place).sort() ?? null,
    name: where.name ?? null,
    keyPrefix: where.keyPrefix,
  })}`;

export const postgresIdentity = (url: string, schema: string): string => `postgres:${digest({ url: place(url), schema })}`;

export const sqliteIdentity = (path: string): string => `sqlite:${digest(resolve(path))}`;

/** Memory books live and die with their process: no other gateway's journal is theirs. */
export const memoryIdentity = (): string => `memory:${randomBytes(8).toString('hex')}`;
