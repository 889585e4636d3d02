/**
 * What every PostgreSQL store shares: the client (the `postgres` package, an optional peer),
 * the schema name, and error mapping.
 */
import type postgres from 'postgres';
import { StoreUnavailableError } from '../errors.js';

export type Sql = postgres.Sql<{ bigint: bigint }>;
type Param = string | number | boolean | null;

/** Thrown when PostgreSQL cannot be reached or failed a statement (the gateway answers 503). */
export class PostgresStoreError extends StoreUnavailableError {
  override readonly name = 'PostgresStoreError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** A statement PostgreSQL did not answer within the timeout (the cause of a PostgresStoreError). */
class UnansweredError extends Error {
  override readonly name = 'UnansweredError';
}

/** Whether a store error is a statement the database did not answer in time. */
export function isUnanswered(err: unknown): boolean {
  return (err as { cause?: unknown })?.cause instanceof UnansweredError;
}

/** Schema names are plain identifiers: they are written into SQL, so nothing else is allowed. */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export class PgContext {
  private closed = false;
  /** The schema, quoted, for table and function names. */
  readonly s: string;

  constructor(
    readonly sql: Sql,
    readonly schema: string,
    /** How long a statement may take, waiting for a connection included, before its call fails. */
    readonly timeoutMs = 5_000,
  ) {
    this.s = `"${schema}"`;
  }

  /**
   * Runs one statement (a prepared statement, cached by its text) and returns its rows. One
   * that has no answer within `timeoutMs` fails (503) whatever the server does: a server that
   * stopped answering cannot enforce its own `statement_timeout`. A statement still queued for
   * a connection then is taken off the queue, so it never runs after its caller was told it
   * failed; one already sent may still land (as with any lost answer), which is what the
   * statements' own idempotency (hold and request ids) is for.
   */
  async q<T extends object>(what: string, text: string, params: Param[] = []): Promise<T[]> {
    if (this.closed) throw new PostgresStoreError(`PostgreSQL ${what} failed: the stores are closed`);
    const query = this.sql.unsafe<T[]>(text, params, { prepare: true });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        // Only a statement not yet sent (no backend `state`): cancelling a sent one opens a
        // connection to the server that is not answering, and its failure is not catchable.
        if (!(query as unknown as { state?: unknown }).state) query.cancel();
        reject(new UnansweredError(`no answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
    });
    try {
      return (await Promise.race([query, late])) as T[];
    } catch (err) {
      throw new PostgresStoreError(`PostgreSQL ${what} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    } finally {
      clearTimeout(timer);
    }
  }

  /** The first row of one statement, or undefined. */
  async one<T extends object>(what: string, text: string, params: Param[] = []): Promise<T | undefined> {
    return (await this.q<T>(what, text, params))[0];
  }

  markClosed(): void {
    this.closed = true;
  }
}

/** A bigint column (or null) as a bigint. */
export function big(v: unknown): bigint {
  if (v === null || v === undefined) return 0n;
  return typeof v === 'bigint' ? v : BigInt(v as string);
}

/** A bigint column (or null) as a number: for times and counts, which stay below 2^53. */
export function num(v: unknown): number {
  return v === null || v === undefined ? 0 : Number(v);
}

/** A count or duration as a non-negative integer (Infinity -> 2^53 - 1). */
export const whole = (n: number) => (Number.isNaN(n) ? 0 : Math.max(0, Math.min(Number.MAX_SAFE_INTEGER, Math.floor(n))));

/** The limit and cap columns are integers; an "unlimited" Infinity is clamped to their top. */
export const int32 = (n: number) => Math.min(whole(n), 2_147_483_647);

/**
 * Whether PostgreSQL can hold these texts: a text value cannot contain NUL (U+0000), and a
 * statement binding one fails as if the database were down. A lookup by an id it cannot hold
 * finds nothing, as in every other driver: an unknown id is 404, never 503, whoever sends it.
 */
export const holdable = (...texts: string[]): boolean => texts.every((t) => !t.includes('\u0000'));

/**
 * Whether a failed statement was refused by PostgreSQL for what it asked (a constraint, a bad
 * value, a timeout), as against a connection that failed: the server answered with an error.
 */
export function isStatementError(err: unknown): boolean {
  const cause = (err as { cause?: unknown })?.cause ?? err;
  return typeof (cause as { severity?: unknown })?.severity === 'string';
}
