import { pageOf } from '../job-page.js';
import { claimedAs, type JobClaim, type JobPage, type JobRecord, type JobStatus, type JobStore } from '../types.js';
import { createSweeper } from './sweep.js';

interface StoredJob {
  job: JobRecord;
  /** When the job disappears (unix ms). */
  goneAt: number;
}

const SWEEP_INTERVAL_MS = 60_000;
const FINISHED: ReadonlySet<JobStatus> = new Set(['completed', 'failed']);

/** Jobs in one process; `update` is a synchronous compare-and-set on the status. */
export function createMemoryJobs(now: () => number): JobStore {
  const jobs = new Map<string, StoredJob>();

  function live(id: string): StoredJob | undefined {
    const stored = jobs.get(id);
    if (stored && stored.goneAt <= now()) {
      jobs.delete(id);
      return undefined;
    }
    return stored;
  }

  const sweep = createSweeper(now, SWEEP_INTERVAL_MS, (t) => {
    for (const [id, stored] of jobs) if (stored.goneAt <= t) jobs.delete(id);
  });

  return {
    async create(job: JobRecord, ttlMs: number): Promise<void> {
      sweep();
      // Like a Redis SET: creating an existing id replaces it.
      jobs.set(job.id, { job: structuredClone(job), goneAt: now() + ttlMs });
    },

    async get(id: string): Promise<JobRecord | null> {
      const stored = live(id);
      return stored ? structuredClone(stored.job) : null;
    },

    async update(id: string, patch: Partial<JobRecord>, whenStatus?: JobStatus[], whenClaim?: JobClaim): Promise<JobRecord | null> {
      const stored = live(id);
      if (!stored) return null;
      if (whenStatus && !whenStatus.includes(stored.job.status)) return null;
      if (!claimedAs(stored.job, whenClaim)) return null;
      // Undefined fields are skipped (as a JSON round trip would), and the id never changes.
      const next: Record<string, unknown> = { ...stored.job };
      for (const [field, value] of Object.entries(structuredClone(patch))) {
        if (value !== undefined && field !== 'id') next[field] = value;
      }
      stored.job = next as unknown as JobRecord;
      return structuredClone(stored.job);
    },

    async listUnfinished(): Promise<JobRecord[]> {
      const t = now();
      const out: JobRecord[] = [];
      for (const [id, stored] of jobs) {
        if (stored.goneAt <= t) jobs.delete(id);
        else if (!FINISHED.has(stored.job.status)) out.push(structuredClone(stored.job));
      }
      return out;
    },

    async listByAccount(accountId: string, object: JobRecord['object'], page: JobPage): Promise<JobRecord[]> {
      const t = now();
      const mine: JobRecord[] = [];
      for (const stored of jobs.values()) {
        if (stored.goneAt > t && stored.job.accountId === accountId && stored.job.object === object) mine.push(stored.job);
      }
      return pageOf(mine, page).map((j) => structuredClone(j));
    },

    async delete(id: string, whenStatus?: JobStatus[]): Promise<boolean> {
      const stored = live(id);
      if (!stored) return false;
      if (whenStatus && !whenStatus.includes(stored.job.status)) return false;
      return jobs.delete(id);
    },
  };
}
