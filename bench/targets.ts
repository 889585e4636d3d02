/**
 * The performance targets, in one place for the benchmark (bench/run.ts) and the Redis command
 * count (bench/redis-commands.ts). They are a report: nothing fails on them.
 */
export type Storage = 'memory' | 'sqlite' | 'postgres' | 'redis';
export const STORAGES: Storage[] = ['memory', 'sqlite', 'postgres', 'redis'];

/**
 * CPU per call of the gateway over the bare relay's, per storage. CPU per call is the headline
 * because it barely moves with other load on the machine, unlike req/s and latency. null: no
 * target is set for that storage; it is still measured and reported.
 */
export const CPU_RATIO_GOAL: Record<Storage, number | null> = { memory: 1.5, sqlite: 2.0, postgres: null, redis: 2.5 };
/** p99 latency at the headline concurrency, at most this factor of the bare relay's. */
export const P99_RATIO_GOAL = 1.5;
/** RSS growth over idle with the held streams open, strictly below this. */
export const HELD_GROWTH_GOAL_BYTES = 100 * 1024 * 1024;
/** The concurrency the targets are judged at. */
export const HEADLINE_C = 50;
/** At most this many Redis commands per billed call: each one is a round trip on the call's path. */
export const MAX_REDIS_COMMANDS_PER_CALL = 3;
