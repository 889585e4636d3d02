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

/** Schema names are plain identifiers: they are written into SQL, so nothing else is allowed. */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export class PgContext {
  private closed = false;
  /** The schema, quoted, for table and function names. */
  readonly s: string;

  constructor(
    readonly sql: Sql,
    readonly schema: string,
  ) {
    this.s = `"${schema}"`;
  }

  /** Runs one statement (a prepared statement, cached by its text) and returns its rows. */
  async q<T extends object>(what: string, text: string, params: Param[] = []): Promise<T[]> {
    if (this.closed) throw new PostgresStoreError(`PostgreSQL ${what} failed: the stores are closed`);
    try {
      return (await this.sql.unsafe<T[]>(text, params, { prepare: true })) as T[];
    } catch (err) {
      throw new PostgresStoreError(`PostgreSQL ${what} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
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
