import { claimedAs, type JobClaim, type JobPage, type JobRecord, type JobStatus, type JobStore } from '../types.js';
import type { SqliteContext } from './connection.js';

/**
 * Jobs: one row per job, the record as JSON beside its status and when it disappears.
 * `update` is a compare-and-set in one IMMEDIATE transaction that merges top-level fields
 * like the memory store (undefined fields skipped, the id never changes) and keeps the TTL.
 */
const BY_ACCOUNT = "json_extract(data, '$.accountId') = ? AND json_extract(data, '$.object') = ? AND gone_at > ?";
const POSITION = "json_extract(data, '$.createdAt'), id";

export function createSqliteJobs(ctx: SqliteContext): JobStore {
  const q = {
    put: ctx.prepare(
      'INSERT INTO jobs (id, status, gone_at, data) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status, gone_at = excluded.gone_at, data = excluded.data',
    ),
    get: ctx.prepare('SELECT data FROM jobs WHERE id = ? AND gone_at > ?'),
    set: ctx.prepare('UPDATE jobs SET status = ?, data = ? WHERE id = ?'),
    unfinished: ctx.prepare("SELECT data FROM jobs WHERE status NOT IN ('completed', 'failed') AND gone_at > ?"),
    // The account's jobs through the jobs_account index; row values compare (created, id) as a pair.
    pageAsc: ctx.prepare(
      `SELECT data FROM jobs WHERE ${BY_ACCOUNT} AND (${POSITION}) > (?, ?) ORDER BY ${POSITION} LIMIT ?`,
    ),
    pageDesc: ctx.prepare(
      `SELECT data FROM jobs WHERE ${BY_ACCOUNT} AND (${POSITION}) < (?, ?) ORDER BY json_extract(data, '$.createdAt') DESC, id DESC LIMIT ?`,
    ),
    status: ctx.prepare('SELECT status FROM jobs WHERE id = ? AND gone_at > ?'),
    remove: ctx.prepare('DELETE FROM jobs WHERE id = ?'),
  };
  const parse = (row: unknown) => JSON.parse((row as { data: string }).data) as JobRecord;

  return {
    async create(job: JobRecord, ttlMs: number): Promise<void> {
      // Like a Redis SET: creating an existing id replaces it.
      ctx.run('createJob', () => q.put.run(job.id, job.status, ctx.now() + ttlMs, JSON.stringify(job)));
    },

    async get(id: string): Promise<JobRecord | null> {
      const row = ctx.run('getJob', () => q.get.get(id, ctx.now()));
      return row ? parse(row) : null;
    },

    async update(id: string, patch: Partial<JobRecord>, whenStatus?: JobStatus[], whenClaim?: JobClaim): Promise<JobRecord | null> {
      return ctx.write('updateJob', () => {
        const row = q.get.get(id, ctx.now());
        if (!row) return null;
        const job = parse(row) as unknown as Record<string, unknown>;
        if (whenStatus && !whenStatus.includes(job.status as JobStatus)) return null;
        if (!claimedAs(job as unknown as JobRecord, whenClaim)) return null;
        for (const [field, value] of Object.entries(patch)) {
          if (value !== undefined && field !== 'id') job[field] = value;
        }
        const data = JSON.stringify(job);
        q.set.run(job.status as string, data, id);
        return JSON.parse(data) as JobRecord;
      });
    },

    async listUnfinished(): Promise<JobRecord[]> {
      return ctx.run('listUnfinishedJobs', () => q.unfinished.all(ctx.now()).map(parse));
    },

    async listByAccount(accountId: string, object: JobRecord['object'], page: JobPage): Promise<JobRecord[]> {
      const asc = page.order === 'asc';
      // Without `after` the page starts at the first job of the order: a position before
      // (or after) every real one.
      const created = page.after?.createdAt ?? (asc ? -1 : Number.MAX_SAFE_INTEGER);
      const id = page.after?.id ?? '';
      const limit = Math.max(0, page.limit);
      return ctx.run('listAccountJobs', () =>
        (asc ? q.pageAsc : q.pageDesc).all(accountId, object, ctx.now(), created, id, limit).map(parse),
      );
    },

    async delete(id: string, whenStatus?: JobStatus[]): Promise<boolean> {
      return ctx.write('deleteJob', () => {
        const row = q.status.get(id, ctx.now()) as { status: JobStatus } | undefined;
        if (!row || (whenStatus && !whenStatus.includes(row.status))) return false;
        q.remove.run(id);
        return true;
      });
    },
  };
}
