/**
 * The end of a batch: its output and error files (OpenAI's line format, in the input's order)
 * written as gateway files of the account, its final status and counts, then its hold released.
 */
import type { Services } from '../../services.js';
import { BATCH_DONE, type BatchLine, type BatchRecord, type BatchStatus } from '../../stores/types.js';
import { changeBatch } from './change.js';
import { newFileId, newLineId } from './views.js';

async function writeFile(core: Services, batch: BatchRecord, kind: 'output' | 'error', lines: BatchLine[]): Promise<string | null> {
  if (lines.length === 0) return null;
  const bytes = new TextEncoder().encode(`${lines.map((l) => l.text).join('\n')}\n`);
  const file = { id: newFileId(), accountId: batch.accountId, purpose: 'batch_output', filename: `${batch.id}_${kind}.jsonl`, bytes: bytes.byteLength, createdAt: Math.floor(core.now() / 1000) };
  await core.stores.batches.putFile(file, bytes);
  return file.id;
}

/** The record of a line that ran (or was refused) under request id `id`: its answer, or the error it got, in OpenAI's line format. */
export function answeredLine(id: string, customId: string, line: number, status: number, body: unknown): BatchLine {
  const ok = status >= 200 && status < 300;
  return { customId, line, ok, text: JSON.stringify({ id, custom_id: customId, response: { status_code: status, request_id: id, body }, error: null }) };
}

/** The error line of a line that never ran (its batch expired first), as OpenAI writes it. */
export function notRunLine(customId: string, line: number, code: string, message: string): BatchLine {
  return { customId, line, ok: false, text: JSON.stringify({ id: newLineId(), custom_id: customId, response: null, error: { code, message } }) };
}

/**
 * Writes the files of what ran (plus `extra` error lines) and moves the batch to `status`
 * (`completed`, `cancelled`, `expired` or `failed`). Returns the batch as stored.
 */
export async function finishBatch(
  core: Services,
  batch: BatchRecord,
  status: BatchStatus,
  extra: BatchLine[] = [],
  /** Why a failed batch failed: written with its status, so no reader sees one without the other. */
  errors: BatchRecord['errors'] = null,
): Promise<BatchRecord | null> {
  const ran = await core.stores.batches.lines(batch.accountId, batch.id);
  const all = [...ran, ...extra].sort((a, b) => a.line - b.line);
  const ok = all.filter((l) => l.ok);
  const failed = all.filter((l) => !l.ok);
  if (status === 'completed') await changeBatch(core.stores.batches, batch, (b) => (b.status === 'in_progress' ? { ...b, status: 'finalizing', finalizingAt: Math.floor(core.now() / 1000) } : null));
  const outputFileId = await writeFile(core, batch, 'output', ok);
  const errorFileId = await writeFile(core, batch, 'error', failed);
  const at = Math.floor(core.now() / 1000);
  const stamp = (s: BatchStatus): Partial<BatchRecord> =>
    s === 'completed' ? { completedAt: at } : s === 'cancelled' ? { cancelledAt: at } : s === 'expired' ? { expiredAt: at } : { failedAt: at };
  const done = await changeBatch(core.stores.batches, batch, (b) => {
    if (BATCH_DONE.includes(b.status)) return null;
    // A cancel that came while the last lines ran still ends the batch cancelled (and only that: not completed too).
    const final = b.status === 'cancelling' && status === 'completed' ? 'cancelled' : status;
    return {
      ...b,
      ...stamp(final),
      status: final,
      outputFileId,
      errorFileId,
      requestCounts: { total: b.requestCounts.total, completed: ok.length, failed: failed.length },
      ...(errors ? { errors } : {}),
      owner: null,
    };
  });
  // Ended meanwhile by another writer (a retried end, another instance): the files written
  // here name nobody's lines and are no one's to list.
  for (const id of [outputFileId, errorFileId]) {
    if (id && done?.outputFileId !== id && done?.errorFileId !== id) await core.stores.batches.deleteFile(batch.accountId, id).catch(() => undefined);
  }
  return done;
}
