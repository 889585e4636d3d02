import type { JobRecord, JobStatus, JobStore } from '../types.js';
import type { SqliteContext } from './connection.js';

/**
 * Jobs: one row per job, the record as JSON beside its status and when it disappears.
 * `update` is a compare-and-set in one IMMEDIATE transaction that merges top-level fields
 * like the memory store (undefined fields skipped, the id never changes) and keeps the TTL.
 */
export function createSqliteJobs(ctx: SqliteContext): JobStore {
  const q = {
    put: ctx.prepare(
      'INSERT INTO jobs (id, status, gone_at, data) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status, gone_at = excluded.gone_at, data = excluded.data',
    ),
    get: ctx.prepare('SELECT data FROM jobs WHERE id = ? AND gone_at > ?'),
    set: ctx.prepare('UPDATE jobs SET status = ?, data = ? WHERE id = ?'),
    unfinished: ctx.prepare("SELECT data FROM jobs WHERE status NOT IN ('completed', 'failed') AND gone_at > ?"),
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

    async update(id: string, patch: Partial<JobRecord>, whenStatus?: JobStatus[]): Promise<JobRecord | null> {
      return ctx.write('updateJob', () => {
        const row = q.get.get(id, ctx.now());
        if (!row) return null;
        const job = parse(row) as unknown as Record<string, unknown>;
        if (whenStatus && !whenStatus.includes(job.status as JobStatus)) return null;
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
  };
}
