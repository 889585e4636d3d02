/** The objects clients see: OpenAI's `OpenAIFile` and `Batch`, field for field, and their lists. */
import { randomBase62 } from '../../auth/keys.js';
import { GatewayError } from '../../errors.js';
import type { BatchRecord, FileRecord } from '../../stores/types.js';
import { shownId } from '../../auth/keys.js';

export function fileView(f: FileRecord): Record<string, unknown> {
  return {
    id: f.id,
    object: 'file',
    bytes: f.bytes,
    created_at: f.createdAt,
    filename: f.filename,
    purpose: f.purpose,
    status: 'processed',
    expires_at: f.expiresAt ?? null,
    status_details: null,
  };
}

/** Whether `f` has expired at `nowS` (unix seconds): it then reads as deleted. */
export const fileExpired = (f: FileRecord, nowS: number): boolean => f.expiresAt != null && f.expiresAt <= nowS;

export function batchView(b: BatchRecord): Record<string, unknown> {
  return {
    id: b.id,
    object: 'batch',
    endpoint: b.endpoint,
    model: b.model,
    errors: b.errors ? { object: 'list', data: b.errors } : null,
    input_file_id: b.inputFileId,
    completion_window: b.completionWindow,
    status: b.status,
    output_file_id: b.outputFileId,
    error_file_id: b.errorFileId,
    created_at: b.createdAt,
    in_progress_at: b.inProgressAt,
    expires_at: b.expiresAt,
    finalizing_at: b.finalizingAt,
    completed_at: b.completedAt,
    failed_at: b.failedAt,
    expired_at: b.expiredAt,
    cancelling_at: b.cancellingAt,
    cancelled_at: b.cancelledAt,
    request_counts: b.requestCounts,
    metadata: b.metadata,
  };
}

/** OpenAI's cursor page: `after` is the last id of the previous page. */
export function listView<T extends { id: string }>(items: T[], more: boolean, view: (t: T) => Record<string, unknown>): Record<string, unknown> {
  return {
    object: 'list',
    data: items.map(view),
    first_id: items[0]?.id ?? null,
    last_id: items.at(-1)?.id ?? null,
    has_more: more,
  };
}

/** `limit` of a list: an integer from 1 to `max`, else `fallback` when absent; 400 otherwise. */
export function listLimit(query: URLSearchParams, max: number, fallback: number): number {
  const raw = query.get('limit');
  if (raw === null) return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1 || n > max) throw new GatewayError('invalid_request', `limit must be an integer from 1 to ${max}.`, { param: 'limit' });
  return n;
}

export const newFileId = () => `file-${randomBase62(24)}`;
export const newBatchId = () => `batch_${randomBase62(32)}`;
export const newLineId = () => `batch_req_${randomBase62(24)}`;

export const fileNotFound = (id: string) => new GatewayError('not_found', `No such File object: ${shownId(id)}`, { param: 'file_id' });
export const batchNotFound = (id: string) => new GatewayError('not_found', `No such Batch object: ${id.slice(0, 100)}`, { param: 'batch_id' });
