/**
 * The ioredis clients the Redis stores create for themselves: one server, a Redis Cluster, or
 * a primary found through Sentinel. All three fail fast instead of queueing: commands time
 * out, nothing waits for a connection, and an unanswered command is never resent behind the
 * caller's back, so money and limit paths answer 503 promptly and the stores recover on
 * their own once Redis answers again.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';

export type RedisClient = Redis | Cluster;

/** Reconnect delays: 50, 100, 200, 400 ms, then every 500 ms, forever. */
export function reconnectDelay(attempt: number): number {
  return Math.min(50 * 2 ** Math.max(0, attempt - 1), 500);
}

interface Endpoint {
  host: string;
  port: number;
  username?: string;
  password?: string;
  tls: boolean;
}

/** "redis://[user:password@]host[:port]" or "rediss://..." (TLS); the port defaults to `port`. */
export function parseEndpoint(url: string, port: number): Endpoint {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`not a Redis URL: "${url}" (expected redis://host:port)`);
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') throw new TypeError(`not a Redis URL: "${url}" (expected redis://host:port)`);
  const out: Endpoint = { host: u.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1', port: u.port ? Number(u.port) : port, tls: u.protocol === 'rediss:' };
  if (u.username) out.username = decodeURIComponent(u.username);
  if (u.password) out.password = decodeURIComponent(u.password);
  return out;
}

/** What every owned connection shares: time out, do not queue, do not resend. */
function failFast(timeoutMs: number): RedisOptions {
  return {
    commandTimeout: timeoutMs,
    connectTimeout: Math.max(timeoutMs, 1_000),
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
  };
}

/**
 * An owned Cluster client sends the commands of one event-loop turn to a node in one write
 * (auto-pipelining): one syscall for the many calls of a busy turn instead of one each. That
 * is safe here: every command is a single-key command or a script whose keys share one hash
 * slot (a Cluster groups a pipeline by node), no command waits for another's reply in the
 * same turn, and a pipeline is not a transaction (each script still runs atomically on its
 * own, one failing command fails alone, and the timeouts above still apply per command).
 */
const PIPELINED = { enableAutoPipelining: true } as const;

/**
 * A single server's or a Sentinel primary's client does not auto-pipeline: the stores already
 * send its per-call scripts in batches (connection.ts), one or two commands per batch, and an
 * auto-pipeline costs more than the write it would save. Per event-loop turn, ioredis builds
 * a Pipeline that copies every defined command onto itself (the stores define 30 scripts),
 * and joins the turn's commands into one string before writing it. With it off, a billed
 * call's store operations cost the gateway about a third less CPU and Redis the same (the
 * figures are in the commit that turned it off and in bench/results/).
 */
const UNPIPELINED = { enableAutoPipelining: false } as const;

/**
 * A primary that was turned into a replica (a Sentinel failover, a manual REPLICAOF) refuses
 * writes with READONLY while the connection stays up: drop the connection, so the next call
 * reconnects (through the sentinels: to the new primary). The refused command is not resent.
 */
function reconnectOnReadOnly(err: Error): boolean {
  return err.message.startsWith('READONLY');
}

export function singleClient(url: string, timeoutMs: number): Redis {
  return new Redis(url, {
    ...failFast(timeoutMs),
    ...UNPIPELINED,
    enableOfflineQueue: false,
    retryStrategy: reconnectDelay,
    reconnectOnError: reconnectOnReadOnly,
  });
}

/**
 * A Cluster client from startup nodes (any subset of the cluster; it discovers the rest).
 * Credentials and TLS come from the first URL that has them and apply to every node.
 */
export function clusterClient(urls: readonly string[], timeoutMs: number): Cluster {
  if (urls.length === 0) throw new TypeError('cluster: give at least one node URL');
  const endpoints = urls.map((u) => parseEndpoint(u, 6379));
  const auth = endpoints.find((e) => e.password !== undefined || e.username !== undefined);
  const redisOptions: ClusterOptions['redisOptions'] = { ...failFast(timeoutMs) };
  if (auth?.username) redisOptions.username = auth.username;
  if (auth?.password) redisOptions.password = auth.password;
  if (endpoints.some((e) => e.tls)) redisOptions.tls = {};
  const options: ClusterOptions = {
    redisOptions,
    ...PIPELINED,
    enableOfflineQueue: false,
    // A command sent to a master that just died is retried after this delay, while the
    // client refreshes its slot table; the command timeout still bounds the caller's wait.
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    // A failover moves slots: read the slot table often enough to notice a promoted replica
    // even when no command was redirected.
    slotsRefreshInterval: 2_000,
    slotsRefreshTimeout: Math.max(timeoutMs, 1_000),
    // Reconnect to the whole cluster forever, quickly at first.
    clusterRetryStrategy: reconnectDelay,
  };
  return new Cluster(
    endpoints.map((e) => ({ host: e.host, port: e.port })),
    options,
  );
}

/**
 * A client of the primary named `name`, found through the sentinels at `urls`. Credentials in
 * the sentinel URLs authenticate to the sentinels; `auth` (when given) to the primary. After a
 * failover the client asks the sentinels again and reconnects to the new primary.
 */
export function sentinelClient(
  urls: readonly string[],
  name: string,
  timeoutMs: number,
  auth: { username?: string | undefined; password?: string | undefined } = {},
): Redis {
  if (urls.length === 0) throw new TypeError('sentinels: give at least one sentinel URL');
  if (!name) throw new TypeError('sentinels: give the `name` the sentinels monitor');
  const endpoints = urls.map((u) => parseEndpoint(u, 26379));
  const sentinelAuth = endpoints.find((e) => e.password !== undefined || e.username !== undefined);
  const tls = endpoints.some((e) => e.tls);
  const options: RedisOptions = {
    ...failFast(timeoutMs),
    ...UNPIPELINED,
    sentinels: endpoints.map((e) => ({ host: e.host, port: e.port })),
    name,
    role: 'master',
    enableOfflineQueue: false,
    retryStrategy: reconnectDelay,
    reconnectOnError: reconnectOnReadOnly,
    sentinelRetryStrategy: reconnectDelay,
    sentinelCommandTimeout: Math.max(timeoutMs, 1_000),
    // The sentinels announce a new primary (+switch-master) the moment they promote it: the
    // client leaves the old one then. Without it the client stays on a primary that is paused
    // (its commands time out for as long as the pause lasts, and a settle kept meanwhile would
    // land on it when it wakes, only to be wiped when it rejoins as a replica) or that was
    // demoted but not yet told (it acknowledges writes its resync will discard).
    failoverDetector: true,
  };
  if (sentinelAuth?.username) options.sentinelUsername = sentinelAuth.username;
  if (sentinelAuth?.password) options.sentinelPassword = sentinelAuth.password;
  if (auth.username) options.username = auth.username;
  if (auth.password) options.password = auth.password;
  if (tls) {
    options.enableTLSForSentinelMode = true;
    options.sentinelTLS = {};
    options.tls = {};
  }
  return new Redis(options);
}

/** Whether `client` is a Cluster (works across copies of ioredis, unlike instanceof). */
export function isCluster(client: RedisClient): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}
