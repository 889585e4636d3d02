/** The `storage` section: the driver that keeps the gateway's state (memory, SQLite, PostgreSQL or Redis). */
import { z } from 'zod';
import { redisUrl, secret } from './values.js';

/**
 * Redis storage: one server (`url`, the default), a Cluster (`cluster`: some of its nodes) or
 * a Sentinel-watched primary (`sentinels` and `name`). Exactly one of the three.
 */
const redisStorage = z
  .strictObject({
    driver: z.literal('redis'),
    /** @default "redis://127.0.0.1:6379" when neither `cluster` nor `sentinels` is given */
    url: redisUrl.optional(),
    /** @example ["redis://10.0.0.7:7000", "redis://10.0.0.8:7000", "redis://10.0.0.9:7000"] */
    cluster: z.array(redisUrl).min(1).optional(),
    /** @example ["redis://10.0.0.7:26379", "redis://10.0.0.8:26379", "redis://10.0.0.9:26379"] */
    sentinels: z.array(redisUrl).min(1).optional(),
    /** With `sentinels`: the name the sentinels monitor the primary by. @example "mymaster" */
    name: z.string().min(1).optional(),
    /** With `sentinels`: the primary's credentials (those in the sentinel URLs are the sentinels' own). */
    username: secret.optional(),
    password: secret.optional(),
    /** @default "mg:" */
    keyPrefix: z.string().regex(/^[^{}]*$/, 'must not contain "{" or "}" (they form hash tags)').default('mg:'),
    /**
     * A command without an answer this long fails its call with 503, and a call waits no longer
     * for a reconnect. @default 1000: a Redis command takes well under a millisecond, and
     * through a failover calls should fail fast and be retried, not queue. (No default
     * written here: earlier versions named the settle journal's folder after this section as
     * given, and that folder is still adopted.)
     */
    timeoutMs: z.number().int().positive().optional(),
  })
  .superRefine((r, ctx) => {
    const given = (['url', 'cluster', 'sentinels'] as const).filter((k) => r[k] !== undefined);
    if (given.length > 1) ctx.addIssue({ code: 'custom', path: [given[1]!], message: `give one of url, cluster or sentinels, not ${given.join(' and ')}` });
    if (r.sentinels && !r.name) ctx.addIssue({ code: 'custom', path: ['name'], message: 'sentinels need the name of the primary they monitor' });
    for (const k of ['name', 'username', 'password'] as const) {
      if (r[k] !== undefined && !r.sentinels) ctx.addIssue({ code: 'custom', path: [k], message: 'only used with sentinels (put credentials in the URL)' });
    }
  });

/**
 * Rate windows and in-flight leases from a Redis beside SQL books: the busiest writes (two per
 * request) then stay off the database. `{driver: "redis", url, keyPrefix}`.
 */
const redisLimits = z.strictObject({
  driver: z.literal('redis'),
  /** @default "redis://127.0.0.1:6379" */
  url: z.string().default('redis://127.0.0.1:6379'),
  /** @default "mg:" */
  keyPrefix: z.string().default('mg:'),
});

export const storageSchema = z.discriminatedUnion('driver', [
  /** Everything in this process's memory: lost on exit (tests, trying things out). */
  z.strictObject({ driver: z.literal('memory') }),
  /**
   * One SQLite file (better-sqlite3, WAL): durable books for one process. A relative
   * `path` is taken from the working directory. `synchronous: "full"` also survives power loss.
   */
  z.strictObject({
    driver: z.literal('sqlite'),
    /** @default "./data/gateway.db" */
    path: z.string().min(1).default('./data/gateway.db'),
    /** @default "normal" */
    synchronous: z.enum(['normal', 'full']).default('normal'),
    /**
     * How long a write waits, off the event loop, for another process's write lock before its
     * call fails with 503. @default 5000 (no default written here: the settle journal's folder
     * was named after this section as given by earlier versions, and is still adopted)
     */
    timeoutMs: z.number().int().positive().optional(),
    limits: redisLimits.optional(),
  }),
  /** One PostgreSQL schema: durable books shared by several instances. */
  z.strictObject({
    driver: z.literal('postgres'),
    url: z.string().min(1),
    /** @default "model_gateway" */
    schema: z
      .string()
      .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case identifier (letters, digits, "_"; at most 63)')
      .default('model_gateway'),
    /**
     * A statement without an answer this long fails its call with 503 (the client enforces
     * it: a server that stopped answering cannot). @default 5000 (no default written here:
     * earlier versions named the settle journal's folder after this section as given, and
     * that folder is still adopted)
     */
    timeoutMs: z.number().int().positive().optional(),
    limits: redisLimits.optional(),
  }),
  redisStorage,
]);
