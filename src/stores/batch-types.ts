/**
 * The batch store's interface: an account's uploaded files (OpenAI's Files API), its batches
 * (OpenAI's Batch API) and the lines a batch has finished. types.ts re-exports all of it.
 */

export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

/** A batch in one of these is over: nothing runs for it again and its hold is released. */
export const BATCH_DONE: readonly BatchStatus[] = ['failed', 'completed', 'expired', 'cancelled'];

export interface FileRecord {
  id: string;
  accountId: string;
  /** "batch" for an upload, "batch_output" for a batch's output and error files. */
  purpose: string;
  filename: string;
  bytes: number;
  /** Unix seconds. */
  createdAt: number;
  /**
   * When (unix seconds) the file stops being there for its account, as its upload asked
   * (`expires_after`); absent or null: never. An expired file reads as deleted.
   */
  expiresAt?: number | null;
}

/** A model's text prices per token, and its tools' per call, as held (pico-USD, decimal strings: JSON has no bigint). */
export interface HeldTextPrices {
  prompt: string;
  completion: string;
  cachedPrompt: string;
  cacheWrite: string;
  cacheWrite1h: string;
  /** Each hosted tool's price per call (pico-USD), when the model prices any. */
  tools?: Record<string, string>;
}

export interface BatchRecord {
  id: string;
  accountId: string;
  /** The key that created the batch: every line is billed to it. */
  keyId: string;
  endpoint: string;
  inputFileId: string;
  completionWindow: string;
  status: BatchStatus;
  /** Unix seconds; null until it happened. */
  createdAt: number;
  inProgressAt: number | null;
  finalizingAt: number | null;
  completedAt: number | null;
  failedAt: number | null;
  expiredAt: number | null;
  cancellingAt: number | null;
  cancelledAt: number | null;
  expiresAt: number;
  outputFileId: string | null;
  errorFileId: string | null;
  /** Why a batch failed as a whole (OpenAI's `errors.data`). */
  errors: { code: string; message: string; line: number | null; param: string | null }[] | null;
  requestCounts: { total: number; completed: number; failed: number };
  metadata: Record<string, string> | null;
  /** The model most lines name (OpenAI's `model`). */
  model: string | null;
  /** What the batch's hold holds (nano-USD, as a decimal string: JSON has no bigint). */
  held: string;
  /**
   * The batch price per token (pico-USD, decimal strings) of each model its lines name, as it
   * was when the batch was created and its lines were held: every line is billed at it, even
   * when the model's price changed since, or another instance runs the line. Absent in a
   * batch created before it was kept: such a batch's lines are billed at the price in force.
   */
  prices?: Record<string, HeldTextPrices>;
  /** The upstream batch that runs it (an upstream with a Batch API), once created. */
  upstream: string | null;
  upstreamBatchId: string | null;
  /**
   * When (unix ms) an instance began creating the upstream batch (absent or null: none did).
   * One that adopts a batch with this set and no `upstreamBatchId` first looks for the upstream
   * batch its owner created and died before recording, by its tag, rather than create another.
   */
  upstreamSubmittedAt?: number | null;
  /** The instance running the batch, and until when (unix ms) it counts as running it. */
  owner: string | null;
  ownerUntil: number;
  /** Bumped by every write: `swapBatch` compares it. */
  rev: number;
}

/** One finished line of a batch: its line of the output file (ok) or of the error file. */
export interface BatchLine {
  customId: string;
  /** The line's 1-based place in the input file: the output follows the input's order. */
  line: number;
  ok: boolean;
  /** The line as written to the output or error file (one JSON object). */
  text: string;
}

/** A page of an account's files or batches, in (createdAt, id) order. */
export interface RecordPage {
  order: 'asc' | 'desc';
  /** The position of the last record of the previous page. */
  after?: { createdAt: number; id: string };
  limit: number;
  /** Files only: only this purpose. */
  purpose?: string;
}

/**
 * Files and batches of every account. Every read names the account: another account's id
 * reads as absent. Writes that race are settled by `swapBatch` (compare-and-set on `rev`) and
 * `addLine` (first write wins); everything else writes one record of one account.
 */
export interface BatchStore {
  /** Stores a new file and its bytes. */
  putFile(file: FileRecord, content: Uint8Array): Promise<void>;
  getFile(accountId: string, id: string): Promise<FileRecord | null>;
  /** The file's bytes, as uploaded or written. */
  fileContent(accountId: string, id: string): Promise<Uint8Array | null>;
  listFiles(accountId: string, page: RecordPage): Promise<FileRecord[]>;
  /** True when the file was there (it and its bytes are gone). */
  deleteFile(accountId: string, id: string): Promise<boolean>;
  /** Stores a new batch (its `rev` as given). */
  createBatch(batch: BatchRecord): Promise<void>;
  getBatch(accountId: string, id: string): Promise<BatchRecord | null>;
  /**
   * Atomic compare-and-set: writes `next` (with `rev` one above) only if the stored batch's
   * `rev` is still `next.rev`. Returns what was written, or null when the batch changed since
   * it was read (or is gone).
   */
  swapBatch(next: BatchRecord): Promise<BatchRecord | null>;
  listBatches(accountId: string, page: RecordPage): Promise<BatchRecord[]>;
  /** Every account's batches that are not over (see BATCH_DONE): what an instance may adopt. */
  unfinishedBatches(): Promise<BatchRecord[]>;
  /** Records a finished line once per (batch, custom id); false when it had one already (that one stays). */
  addLine(accountId: string, batchId: string, line: BatchLine): Promise<boolean>;
  /** The batch's finished lines, in no particular order. */
  lines(accountId: string, batchId: string): Promise<BatchLine[]>;
}
