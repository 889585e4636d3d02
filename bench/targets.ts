/**
 * The performance targets, in one place for the benchmark (bench/run.ts) and the Redis command
 * count (bench/redis-commands.ts). They are a report: nothing fails on them.
 */
export type Storage = 'memory' | 'sqlite' | 'postgres' | 'redis';
export const STORAGES: Storage[] = ['memory', 'sqlite', 'postgres', 'redis'];

/**
 * CPU per call of the gateway process over the bare relay's, per storage and call shape:
 * plain, streamed in one write, streamed paced (one event per write). CPU per call is the
 * headline because it barely moves with other load on the machine, unlike req/s and latency
 * (p99 is reported, not judged: on a shared 2-core machine the store's own processes, the
 * upstream and the load generator take the gateway's cores). null: no target is set for that
 * storage; it is still measured and reported. The paired shape (two events per write) is
 * there for the per-event figure and has no target of its own.
 */
export const CPU_RATIO_GOAL: Record<Storage, { plain: number; stream: number; paced: number; paired?: number } | null> = {
  memory: { plain: 1.6, stream: 2.0, paced: 1.3 },
  sqlite: { plain: 2.0, stream: 2.4, paced: 1.5 },
  postgres: null,
  redis: { plain: 2.5, stream: 2.8, paced: 1.6 },
};
/**
 * The same for the real shape (bench/shapes.ts: the SDK's default request to an alias, the
 * names rewritten and the unasked usage chunk dropped), the headline: set from issue 53's
 * measured range, looser than the kind shape's where the rewrite is work the kind shape
 * never does.
 */
export const REAL_CPU_RATIO_GOAL: typeof CPU_RATIO_GOAL = {
  memory: { plain: 1.8, stream: 2.0, paced: 1.3 },
  sqlite: { plain: 2.1, stream: 2.3, paced: 1.5 },
  postgres: null,
  redis: { plain: 2.5, stream: 2.5, paced: 1.6 },
};
/** Gateway CPU per streamed event over the bare relay's, at most this many µs. */
export const PER_EVENT_US_GOAL = 3;
/** The gateway's req/s at least this many times the peer's, plain and streamed (one write). */
export const PEER_RPS_GOAL = { plain: 8, stream: 4 };
/** The same in the real shape: the peer passes a stream through, so it does less there than we do. */
export const REAL_PEER_RPS_GOAL = { plain: 5, stream: 3 };
/** RSS of the CLI right after it started (no call yet), at most this. */
export const IDLE_RSS_GOAL_BYTES = 90 * 1024 * 1024;
/** RSS growth over idle with the held streams open, strictly below this. */
export const HELD_GROWTH_GOAL_BYTES = 100 * 1024 * 1024;
/** The concurrency the targets are judged at. */
export const HEADLINE_C = 50;
/** At most this many Redis commands per billed call: each one is a round trip on the call's path. */
export const MAX_REDIS_COMMANDS_PER_CALL = 3;
