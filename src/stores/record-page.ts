/**
 * The order of an account's files and batches, the same in every driver: by `createdAt`, then
 * by id in byte order (see job-page.ts), for drivers that page them in memory.
 */
import { compareJobPosition } from './job-page.js';
import type { RecordPage } from './batch-types.js';

export function pageRecords<T extends { createdAt: number; id: string; purpose?: string }>(records: T[], page: RecordPage): T[] {
  const dir = page.order === 'asc' ? 1 : -1;
  const after = page.after;
  return records
    .filter((r) => (page.purpose === undefined || r.purpose === page.purpose) && (!after || dir * compareJobPosition(r, after) > 0))
    .sort((a, b) => dir * compareJobPosition(a, b))
    .slice(0, Math.max(0, page.limit));
}
