import postgres from 'postgres';
import type { Stores } from '../types.js';
import { createPostgresAccounts, createPostgresKeys } from './accounts-keys.js';
import { createPostgresBilling } from './billing.js';
import { PgContext, PostgresStoreError, SCHEMA_NAME, type Sql } from './connection.js';
import { createPostgresContent } from './content.js';
import { createPostgresIdempotency } from './idempotency.js';
import { createPostgresResponseCache } from './response-cache.js';
import { createPostgresBatches } from './batches.js';
import { createPostgresJobs } from './jobs.js';
import { createPostgresLimits } from './limits.js';
import { migrate } from './migrations.js';
import { watchedSockets } from './socket.js';
import { postgresIdentity } from '../identity.js';

export { PostgresStoreError } from './connection.js';

export interface PostgresStoreOptions {
  /**
   * Connection URL (default postgres://127.0.0.1:5432/postgres).
   * @example "postgres://gateway:secret@db.internal:5432/gateway"
   */
  url?: string;
  /**
   * Schema holding the gateway's tables (created when missing): a lower-case identifier.
   * Several gateways may share one database with different schemas. Default "model_gateway".
   */
  schema?: string;
  /** Connections in the pool (default 10). */
  maxConnections?: number;
  /**
   * How long a statement may go unanswered, waiting for a connection included, before its call
   * fails with 503 (default 5000 ms). Enforced by this client, so it holds also when the server
   * stops answering; a connection silent that long is dropped and a fresh one opened.
   */
  timeoutMs?: number;
  /** How long to wait for a connection before a call fails (default `timeoutMs`). */
  connectTimeoutMs?: number;
  /** Statements running longer than this are cancelled by the server (default `timeoutMs`). */
  statementTimeoutMs?: number;
  /** Idle connections are closed after this long (default 60000 ms). */
  idleTimeoutMs?: number;
}

const DEFAULT_URL = 'postgres://127.0.0.1:5432/postgres';
/** How often, at most, the stores delete expired holds, windows, leases, jobs and records. */
const SWEEP_INTERVAL_MS = 60_000;
/** How long the migrations at start may take, waiting for another instance's included. */
const MIGRATION_TIMEOUT_MS = 60_000;

/**
 * Every store in one PostgreSQL schema: durable books shared by several gateway instances.
 * Applies the schema's migrations first (safe when several instances start at once), so it
 * is async. Holds, settles, rate windows and leases are atomic in the database (one function
 * call each, under a row or advisory lock), timed by the database clock.
 */
export async function createPostgresStores(options: PostgresStoreOptions = {}): Promise<Stores> {
  const schema = options.schema ?? 'model_gateway';
  if (!SCHEMA_NAME.test(schema)) {
    throw new RangeError(`schema must be a lower-case identifier (letters, digits, "_"; at most 63), got ${JSON.stringify(schema)}`);
  }
  const timeoutMs = options.timeoutMs ?? 5_000;
  const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));
  // The migrations may wait for another instance's (a fresh schema takes seconds), so the
  // watchdog allows a minute until they are done; then a live server gets a second past its
  // own statement_timeout to say so.
  const silence = { ms: MIGRATION_TIMEOUT_MS };
  const sql: Sql = postgres(options.url ?? DEFAULT_URL, {
    max: options.maxConnections ?? 10,
    connect_timeout: seconds(options.connectTimeoutMs ?? timeoutMs),
    idle_timeout: seconds(options.idleTimeoutMs ?? 60_000),
    socket: watchedSockets(silence),
    types: { bigint: postgres.BigInt },
    // "already exists, skipping" notices from the migrations are expected.
    onnotice: () => {},
    connection: {
      application_name: 'model-gateway',
      statement_timeout: options.statementTimeoutMs ?? timeoutMs,
    } as Record<string, string | number>,
  } as postgres.Options<{ bigint: postgres.PostgresType<bigint> }>);
  const ctx = new PgContext(sql, schema, timeoutMs);
  try {
    await migrate(sql, schema, ctx.s, MIGRATION_TIMEOUT_MS);
    silence.ms = Math.max(options.connectTimeoutMs ?? 0, options.statementTimeoutMs ?? 0, timeoutMs) + 1_000;
  } catch (err) {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw new PostgresStoreError(`PostgreSQL migrations for schema "${schema}" failed: ${(err as Error)?.message ?? String(err)}`, {
      cause: err,
    });
  }

  // Lazy housekeeping on the busiest calls, at most once a minute per instance, never awaited:
  // expired rows already count for nothing, this only keeps the tables small.
  let lastSweep = Date.now();
  let sweeping = false;
  const sweep = () => {
    const t = Date.now();
    if (sweeping || t - lastSweep < SWEEP_INTERVAL_MS) return;
    lastSweep = t;
    sweeping = true;
    ctx
      .q('sweep', `SELECT ${ctx.s}.mg_sweep()`)
      .catch(() => {})
      .finally(() => (sweeping = false));
  };

  // The windows live in this schema beside the books: a hold may count a window hit in its own call.
  const windowsId = Symbol('postgres windows');
  return {
    identity: postgresIdentity(options.url ?? DEFAULT_URL, schema),
    accounts: createPostgresAccounts(ctx),
    keys: createPostgresKeys(ctx),
    billing: createPostgresBilling(ctx, sweep, windowsId),
    limits: createPostgresLimits(ctx, sweep, windowsId),
    jobs: createPostgresJobs(ctx),
    batches: createPostgresBatches(ctx),
    content: createPostgresContent(ctx),
    idempotency: createPostgresIdempotency(ctx),
    responseCache: createPostgresResponseCache(ctx),
    async ping() {
      await ctx.one('ping', 'SELECT 1 AS one');
    },
    async close() {
      ctx.markClosed();
      await sql.end({ timeout: 5 });
    },
  };
}
