/** PostgreSQL helpers shared by the benchmarks and the tests that need a real PostgreSQL. */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';

export const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Why PostgreSQL at `url` cannot be used, or null when it answers. Never waits long. */
export async function postgresProblem(url = POSTGRES_URL): Promise<string | null> {
  const sql = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    await sql`SELECT 1`;
    return null;
  } catch (err) {
    return (err as Error).message || String(err);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/** A schema name no other run uses. */
export function freshSchema(prefix = 'mgtest'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

/** Drops a schema and everything in it. */
export async function dropSchema(schema: string, url = POSTGRES_URL): Promise<void> {
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new RangeError(`not a schema name: ${schema}`);
  const sql = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    await sql.unsafe(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}
