import type { JobClaim, JobPage, JobRecord, JobStatus, JobStore } from '../types.js';
import { holdable, type PgContext } from './connection.js';
import { jsonText } from '../json-text.js';

const whole = (n: number) => Math.max(0, Math.min(Number.MAX_SAFE_INTEGER, Math.floor(n)));

/**
 * Jobs: one row per job, the record as jsonb beside its status and when it disappears.
 * `update` is one UPDATE: a compare-and-set on the status that merges the patch's top-level
 * fields (jsonb `||`), like the memory store; undefined fields and the id are left out.
 */
export function createPostgresJobs(ctx: PgContext): JobStore {
  const { s } = ctx;
  return {
    async create(job: JobRecord, ttlMs: number): Promise<void> {
      // Like a Redis SET: creating an existing id replaces it.
      await ctx.q(
        'createJob',
        `INSERT INTO ${s}.jobs (id, status, gone_at, data) VALUES ($1, $2, ${s}.mg_now() + $3::bigint, $4::text::jsonb)
          ON CONFLICT (id) DO UPDATE SET status = excluded.status, gone_at = excluded.gone_at, data = excluded.data`,
        [job.id, job.status, whole(ttlMs), jsonText(job)],
      );
    },

    async get(id: string): Promise<JobRecord | null> {
      // An id PostgreSQL cannot hold names no job.
      if (!holdable(id)) return null;
      const r = await ctx.one<{ data: JobRecord }>(
        'getJob',
        `SELECT data FROM ${s}.jobs WHERE id = $1 AND gone_at > ${s}.mg_now()`,
        [id],
      );
      return r ? r.data : null;
    },

    async update(id: string, patch: Partial<JobRecord>, whenStatus?: JobStatus[], whenClaim?: JobClaim): Promise<JobRecord | null> {
      // An id PostgreSQL cannot hold names no job.
      if (!holdable(id)) return null;
      const { id: _id, ...fields } = patch;
      // The claim is matched by containment: the record holds that owner (and that deadline).
      const r = await ctx.one<{ data: JobRecord }>(
        'updateJob',
        `UPDATE ${s}.jobs SET data = data || $2::text::jsonb, status = coalesce($2::text::jsonb ->> 'status', status)
          WHERE id = $1 AND gone_at > ${s}.mg_now() AND ($3::text::jsonb IS NULL OR jsonb_exists($3::text::jsonb, status))
            AND ($4::text::jsonb IS NULL OR data @> $4::text::jsonb)
          RETURNING data`,
        [id, jsonText(fields), whenStatus === undefined ? null : jsonText(whenStatus), whenClaim === undefined ? null : jsonText(whenClaim)],
      );
      return r ? r.data : null;
    },

    async listUnfinished(): Promise<JobRecord[]> {
      const rows = await ctx.q<{ data: JobRecord }>(
        'listUnfinishedJobs',
        `SELECT data FROM ${s}.jobs WHERE status NOT IN ('completed', 'failed') AND gone_at > ${s}.mg_now()`,
      );
      return rows.map((r) => r.data);
    },

    async listByAccount(accountId: string, object: JobRecord['object'], page: JobPage): Promise<JobRecord[]> {
      const asc = page.order === 'asc';
      // Without `after` the page starts at the first job of the order: a position before
      // (or after) every real one. Ids compare in byte order, as in every driver.
      const created = page.after?.createdAt ?? (asc ? -1 : Number.MAX_SAFE_INTEGER);
      const id = page.after?.id ?? '';
      const position = `((data ->> 'createdAt')::bigint, id COLLATE "C")`;
      const rows = await ctx.q<{ data: JobRecord }>(
        'listAccountJobs',
        `SELECT data FROM ${s}.jobs
          WHERE data ->> 'accountId' = $1 AND data ->> 'object' = $2 AND gone_at > ${s}.mg_now()
            AND ${position} ${asc ? '>' : '<'} ($3::bigint, $4::text COLLATE "C")
          ORDER BY (data ->> 'createdAt')::bigint ${asc ? 'ASC' : 'DESC'}, id COLLATE "C" ${asc ? 'ASC' : 'DESC'}
          LIMIT $5`,
        [accountId, object, created, id, Math.max(0, page.limit)],
      );
      return rows.map((r) => r.data);
    },

    async delete(id: string, whenStatus?: JobStatus[]): Promise<boolean> {
      // An id PostgreSQL cannot hold names no job.
      if (!holdable(id)) return false;
      const r = await ctx.one<{ id: string }>(
        'deleteJob',
        `DELETE FROM ${s}.jobs WHERE id = $1 AND gone_at > ${s}.mg_now()
          AND ($2::text::jsonb IS NULL OR jsonb_exists($2::text::jsonb, status)) RETURNING id`,
        [id, whenStatus === undefined ? null : jsonText(whenStatus)],
      );
      return r !== undefined;
    },
  };
}
