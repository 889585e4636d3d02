import type { JobClaim, JobPage, JobRecord, JobStatus, JobStore } from '../types.js';
import type { RedisClient } from './clients.js';
import { hashEntries, int, list, type RedisContext, str, whole } from './connection.js';

const FINISHED: ReadonlySet<JobStatus> = new Set(['completed', 'failed']);

/** A job's top-level fields as [field, JSON value] pairs; undefined fields are skipped. */
function encode(fields: Partial<JobRecord>, skipId: boolean): string[] {
  const out: string[] = [];
  for (const [field, value] of Object.entries(fields)) {
    if (value === undefined || (skipId && field === 'id')) continue;
    out.push(field, JSON.stringify(value));
  }
  return out;
}

function decode(entries: [string, string][]): JobRecord | null {
  if (entries.length === 0) return null;
  const job: Record<string, unknown> = {};
  for (const [field, value] of entries) job[field] = JSON.parse(value);
  return job as unknown as JobRecord;
}

/** Keeps the unfinished index in step with a job's status (`goneAt`: when the job disappears). */
async function reindex(client: RedisClient, index: string, id: string, status: unknown, goneAt: unknown): Promise<void> {
  if (typeof status !== 'string') return;
  if (FINISHED.has(status as JobStatus)) await client.zrem(index, id);
  else await client.zadd(index, String(int(goneAt)), id);
}

/**
 * How many of a listing's members (`WITHSCORES` pairs) come at or before `after` in the
 * listing's order: the position a page after it starts from when it is no longer listed.
 */
function countBefore(members: string[], after: { createdAt: number; id: string }, asc: boolean): number {
  const { createdAt, id } = after;
  let before = 0;
  for (let i = 0; i + 1 < members.length; i += 2) {
    const m = { id: members[i]!, createdAt: Number(members[i + 1]) };
    const cmp = m.createdAt !== createdAt ? m.createdAt - createdAt : m.id < id ? -1 : m.id > id ? 1 : 0;
    if (asc ? cmp <= 0 : cmp >= 0) before++;
  }
  return before;
}

/**
 * Jobs: one hash per job (`P{j:<id>}`, field -> JSON value) with PEXPIRE, so `update` is a
 * compare-and-set in one script that merges top-level fields like the memory store does, and
 * never touches the TTL.
 *
 * Unfinished jobs are indexed in `P{idx}:jobs`, a sorted set of id -> when the job
 * disappears. For Redis Cluster the index cannot share a slot with every job, so it is written
 * with its own command after the job's script: a crash in between can leave a job out of the
 * index (it still expires with its TTL) or leave a finished job in it (readers filter by
 * status, and entries are dropped once the job's TTL has passed).
 *
 * Each account's jobs of one kind are listed in `P{a:<account>}:jobs:<kind>`, a sorted set of
 * id -> createdAt (members of one score sort by id, byte order: the listing's order), written
 * after the job's script like the unfinished index and expiring with the newest job. An entry
 * whose job is gone (expired, deleted, or a crash between the two writes) is skipped and
 * dropped when a listing meets it.
 */
export function createRedisJobs(ctx: RedisContext): JobStore {
  const { client, scripts } = ctx;
  const index = ctx.index('jobs');

  const byAccount = (accountId: string, object: string) => ctx.account(accountId, `jobs:${object}`);

  return {
    async create(job: JobRecord, ttlMs: number): Promise<void> {
      await ctx.run('createJob', async () => {
        const goneAt = await scripts.mgJobCreate(
          [ctx.job(job.id)],
          [whole(ttlMs), 'id', JSON.stringify(job.id), ...encode(job, true)],
        );
        await reindex(client, index, job.id, job.status, goneAt);
        if (typeof job.accountId === 'string' && typeof job.object === 'string') {
          const listed = byAccount(job.accountId, job.object);
          await client.zadd(listed, String(whole(job.createdAt ?? 0)), job.id);
          // The listing lives as long as its longest-lived job (never shortened by a shorter one).
          if ((await client.pttl(listed)) < ttlMs) await client.pexpire(listed, whole(ttlMs));
        }
      });
    },

    async listByAccount(accountId: string, object: JobRecord['object'], page: JobPage): Promise<JobRecord[]> {
      const listed = byAccount(accountId, object);
      const asc = page.order === 'asc';
      const limit = Math.max(0, page.limit);
      return ctx.run('listAccountJobs', async () => {
        const out: JobRecord[] = [];
        let start = 0;
        if (page.after) {
          // The position right after `after`; when it is no longer listed, counted from its place.
          const rank = asc ? await client.zrank(listed, page.after.id) : await client.zrevrank(listed, page.after.id);
          if (rank !== null) start = rank + 1;
          else start = countBefore(await client.zrange(listed, '0', '-1', 'WITHSCORES'), page.after, asc);
        }
        while (out.length < limit) {
          const want = limit - out.length;
          const ids = asc
            ? await client.zrange(listed, String(start), String(start + want - 1))
            : await client.zrevrange(listed, start, start + want - 1);
          if (ids.length === 0) break;
          start += ids.length;
          const jobs = await Promise.all(ids.map(async (id) => decode(hashEntries(await client.hgetall(ctx.job(id))))));
          const gone = ids.filter((_, i) => jobs[i] === null);
          for (const j of jobs) if (j) out.push(j);
          if (gone.length) {
            await client.zrem(listed, ...gone);
            start -= gone.length;
          }
        }
        return out;
      });
    },

    async delete(id: string, whenStatus?: JobStatus[]): Promise<boolean> {
      const when = whenStatus === undefined ? ['-1'] : [String(whenStatus.length), ...whenStatus.map((s) => JSON.stringify(s))];
      return ctx.run('deleteJob', async () => {
        const reply = await scripts.mgJobDelete([ctx.job(id)], when);
        if (reply === null || reply === undefined) return false;
        const [accountId, object] = list(reply).map((v) => JSON.parse(str(v) ?? 'null') as unknown);
        await client.zrem(index, id);
        if (typeof accountId === 'string' && typeof object === 'string') await client.zrem(byAccount(accountId, object), id);
        return true;
      });
    },

    async get(id: string): Promise<JobRecord | null> {
      return decode(hashEntries(await ctx.run('getJob', () => client.hgetall(ctx.job(id)))));
    },

    async update(id: string, patch: Partial<JobRecord>, whenStatus?: JobStatus[], whenClaim?: JobClaim): Promise<JobRecord | null> {
      const when = whenStatus === undefined ? ['-1'] : [String(whenStatus.length), ...whenStatus.map((s) => JSON.stringify(s))];
      // The claim's fields, encoded as the record's are: equal values are equal strings.
      const claim = whenClaim === undefined ? [] : encode({ owner: whenClaim.owner, ownerUntil: whenClaim.ownerUntil }, true);
      return ctx.run('updateJob', async () => {
        const reply = await scripts.mgJobUpdate([ctx.job(id)], [...when, String(claim.length / 2), ...claim, ...encode(patch, true)]);
        if (reply === null || reply === undefined) return null;
        const [goneAt, fields] = list(reply);
        const job = decode(hashEntries(fields));
        if (job && patch.status !== undefined) await reindex(client, index, id, job.status, goneAt);
        return job;
      });
    },

    async listUnfinished(): Promise<JobRecord[]> {
      return ctx.run('listUnfinishedJobs', async () => {
        const ids = list(await scripts.mgJobIndex([index], [])).map((v) => str(v) ?? '');
        const jobs = await Promise.all(ids.map(async (id) => decode(hashEntries(await client.hgetall(ctx.job(id))))));
        return jobs.filter((j): j is JobRecord => j !== null && !FINISHED.has(j.status));
      });
    },
  };
}
