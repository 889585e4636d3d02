/**
 * The order of an account's job listing, the same in every driver: by `createdAt`, then by
 * id in byte order (ids are ASCII: Redis sorts members, SQLite and PostgreSQL (`COLLATE "C"`)
 * sort text the same way), so a page boundary is exact even between jobs created in the same
 * second.
 */
import type { JobPage, JobRecord } from './types.js';

/** Negative when `a` comes first in ascending order. */
export function compareJobPosition(a: { createdAt: number; id: string }, b: { createdAt: number; id: string }): number {
  if (a.createdAt !== b.createdAt) return a.createdAt - b.createdAt;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** One page of `jobs` (already filtered to the account and kind), for drivers that hold them in memory. */
export function pageOf(jobs: JobRecord[], page: JobPage): JobRecord[] {
  const dir = page.order === 'asc' ? 1 : -1;
  const after = page.after;
  return jobs
    .filter((j) => !after || dir * compareJobPosition(j, after) > 0)
    .sort((a, b) => dir * compareJobPosition(a, b))
    .slice(0, Math.max(0, page.limit));
}
