/**
 * The batch runner of one instance. A batch is run by one instance at a time: the one named
 * in its record (`owner`), for as long as it renews `ownerUntil` (a lease, as for media jobs).
 * The instance that creates a batch runs it; one that stops renewing (a crash, a deploy) has
 * its batches adopted by the next sweep of another, which runs the lines not yet recorded (a
 * line in flight when the first died runs again, and is billed once: its charge id is closed).
 * A cancel is seen within a second (the running instance re-reads the record that often, and
 * at once when the cancel reached it); the lines already running finish and are billed.
 */
import { heldLines, keepBatchLines, releaseBatchLines } from '../../billing/batch.js';
import type { BatchRunner } from '../../jobs/batches.js';
import type { Services } from '../../services.js';
import { isStoreUnavailable } from '../../stores/errors.js';
import { type ApiKeyRecord, BATCH_DONE, type BatchRecord } from '../../stores/types.js';
import { changeBatch } from './change.js';
import { finishBatch, notRunLine } from './finish.js';
import { readBatchInput } from './input.js';
import { runLines } from './local.js';
import { abandonUpstreamBatch, runUpstreamBatch } from './upstream.js';
import { LeaseWatch } from '../../jobs/lease-watch.js';

/** How often a running batch's record is read again (a cancel from another instance). */
const LOOK_MS = 500;
/** The longest wait before a batch a store error stopped is run again here. */
const RETRY_MAX_MS = 5 * 60_000;

interface Entry {
  batch: BatchRecord;
  /** Every line's custom id, once the input was read: what the end releases. */
  customIds?: string[];
  poked: boolean;
}

/** Why a batch fails as a whole before all its lines ran, and what it tells the client. */
const FAILED_BY = {
  key_deleted: 'The key that created the batch was deleted.',
  key_disabled: 'The key that created the batch was disabled.',
  input_file_deleted: 'The input file was deleted.',
} as const;

/** The batch's failure, in OpenAI's `errors.data` shape. */
const failedBy = (code: keyof typeof FAILED_BY) => ({ code, message: FAILED_BY[code], line: null, param: null });

/** Why the key a batch runs as can make no more calls (null: it still can). */
const keyGoneReason = (key: ApiKeyRecord | null): 'key_deleted' | 'key_disabled' | null => (!key ? 'key_deleted' : key.disabled ? 'key_disabled' : null);

export function createBatchRunner(core: Services): BatchRunner {
  const { stores, log } = core;
  const ttl = core.cfg.limits.inFlightLeaseTtlMs;
  const owned = new Map<string, Entry>();
  const me = () => core.jobs.instanceId;
  const seconds = () => Math.floor(core.now() / 1000);
  // Another instance's claim lapses when this one saw it unrenewed for one TTL (no clocks compared).
  const watch = new LeaseWatch(ttl, core.now);

  const release = async (batch: BatchRecord, customIds: readonly string[]) => {
    // Not the lines answered: one recorded as answered was billed, and its settle closes its
    // hold, also one kept through an outage in some instance's journal (this one's, or one
    // that stopped and replays it on restart); released first, that settle would land on a
    // closed id and charge nothing. The record unread, every line is released (this
    // instance's kept settles are never released).
    const billed = await stores.batches.lines(batch.accountId, batch.id).then(
      (lines) => new Set(lines.filter((l) => l.ok).map((l) => l.customId)),
      () => null,
    );
    const unbilled = billed ? customIds.filter((c) => !billed.has(c)) : customIds;
    await releaseBatchLines(core.meter, batch, unbilled).catch((err: unknown) =>
      log.warn({ msg: 'releasing a batch’s lines failed; their holds lapse on their own', batch_id: batch.id, err }),
    );
  };

  /**
   * Batches whose run a store error stopped, and when this instance may run them again: a
   * failure that is the store's own (a statement it refuses every time) would otherwise rerun
   * the batch, and its unrecorded line upstream, at every sweep. The wait doubles, up to
   * RETRY_MAX_MS; a run that ends clears it. This instance's own wait: once its claim lapses,
   * another instance may adopt the batch sooner.
   */
  const retries = new Map<string, { at: number; delayMs: number }>();
  const retryLater = (id: string) => {
    const delayMs = Math.min(RETRY_MAX_MS, (retries.get(id)?.delayMs ?? Math.max(50, Math.floor(ttl / 3)) / 2) * 2);
    retries.set(id, { at: core.now() + delayMs, delayMs });
  };
  const waiting = (id: string) => (retries.get(id)?.at ?? 0) > core.now();

  /** Reads the record again (at most every LOOK_MS unless poked); false once gone. */
  const look = async (e: Entry, force = false): Promise<void> => {
    const fresh = await stores.batches.getBatch(e.batch.accountId, e.batch.id);
    if (fresh) e.batch = fresh;
    if (force) e.poked = false;
  };

  async function run(e: Entry): Promise<void> {
    let lastLook = core.now();
    // The key disabled or deleted while the lines ran (it is looked at with the record).
    let keyGone: 'key_disabled' | 'key_deleted' | null = null;
    const stopping = async () => {
      if (core.stopping.aborted) return true;
      if (e.poked || core.now() - lastLook > LOOK_MS) {
        lastLook = core.now();
        await look(e, true).catch(() => undefined);
        const now = await stores.keys.get(e.batch.keyId).catch(() => undefined);
        if (now !== undefined) keyGone = keyGoneReason(now);
      }
      return keyGone !== null || e.batch.status === 'cancelling' || e.batch.status === 'cancelled' || seconds() >= e.batch.expiresAt;
    };
    const { batch } = e;
    const [key, input] = await Promise.all([stores.keys.get(batch.keyId), stores.batches.fileContent(batch.accountId, batch.inputFileId)]);
    const lines = input ? await readBatchInput(input, batch.endpoint) : [];
    // Known before any way out: when the batch is over, what its unrun lines hold is released.
    // Without its input (deleted while the batch ran) the lines are found by their holds.
    e.customIds = input
      ? lines.map((l) => l.customId)
      : await heldLines(stores.billing, batch).catch((err: unknown) => {
          log.warn({ msg: 'the holds of a batch without its input could not be read; they lapse on their own', batch_id: batch.id, err });
          return [];
        });
    // A batch whose key is gone or disabled runs no more lines (as the key could make no more calls).
    if (!key || key.disabled || !input) {
      // An upstream batch running it is cancelled: nobody will read (and bill) its answers.
      await abandonUpstreamBatch(core, batch);
      await finishBatch(core, batch, 'failed', [], [failedBy(keyGoneReason(key) ?? 'input_file_deleted')]);
      return;
    }
    // A batch adopted while finalizing ran every line already: only its files and status are left.
    if (batch.status !== 'finalizing') {
      // The lines not yet recorded keep their holds to the window's end (placed for the hold
      // TTL only, in case the batch was never recorded).
      const recorded = new Set((await stores.batches.lines(batch.accountId, batch.id)).map((l) => l.customId));
      const open = lines.filter((l) => !recorded.has(l.customId)).map((l) => l.customId);
      const kept = await keepBatchLines(stores.billing, batch, open, batch.expiresAt * 1000, core.now());
      // A hold gone (no instance ran the batch within the hold TTL of its creation) or not
      // renewed: its line is still billed in full when it runs, but holds no money meanwhile.
      if (kept.gone + kept.failed > 0) log.warn({ msg: 'some batch line holds do not last the batch: gone, or not renewed', batch_id: batch.id, ...kept });
      if (batch.upstream) await runUpstreamBatch(core, { batch, stopping, seen: (b) => (e.batch = b) }, key, lines);
      else await runLines(core, { get batch() { return e.batch; }, stopping }, key, lines);
    }
    if (core.stopping.aborted) return;
    await look(e);
    const b = e.batch;
    // As a key found gone at the start: the lines that ran stand (billed, in the output), the
    // rest are not run and their holds are released. A batch whose every line ran (its
    // upstream batch ended as the key went) completes as it would have.
    const unrun = keyGone !== null && (b.status === 'in_progress' || b.status === 'finalizing') ? lines.length - (await stores.batches.lines(b.accountId, b.id)).length : 0;
    if (keyGone !== null && unrun > 0) {
      await abandonUpstreamBatch(core, b);
      await finishBatch(core, b, 'failed', [], [failedBy(keyGone)]);
      return;
    }
    if (b.status === 'cancelling') await finishBatch(core, b, 'cancelled');
    else if (b.status === 'in_progress' && seconds() >= b.expiresAt) {
      const done = new Set((await stores.batches.lines(b.accountId, b.id)).map((l) => l.customId));
      const notRun = lines.filter((l) => !done.has(l.customId)).map((l) => notRunLine(l.customId, l.line, 'batch_expired', 'This request could not be executed before the completion window expired.'));
      await finishBatch(core, b, 'expired', notRun);
    } else if (b.status === 'in_progress' || b.status === 'finalizing') await finishBatch(core, b, 'completed');
  }

  function own(e: Entry): void {
    if (owned.has(e.batch.id)) return;
    owned.set(e.batch.id, e);
    // Whether the batch is over when its run ends: what its unrun lines hold is then released.
    let over = true;
    const p = run(e)
      .then(() => void retries.delete(e.batch.id))
      .catch(async (err: unknown) => {
        if (core.stopping.aborted) return log.warn({ msg: 'a batch stopped with its instance', batch_id: e.batch.id, err });
        if (isStoreUnavailable(err)) {
          // The store did not answer: nothing about the batch is decided. What ran is recorded
          // and billed; a later sweep runs the lines not yet recorded, once the store answers
          // again. A batch whose end was written already is over: its unrun lines are released.
          const fresh = await stores.batches.getBatch(e.batch.accountId, e.batch.id).catch(() => null);
          over = fresh !== null && BATCH_DONE.includes(fresh.status);
          if (!over) retryLater(e.batch.id);
          return log.warn({ msg: 'running a batch stopped: the store did not answer', batch_id: e.batch.id, over, err });
        }
        log.error({ msg: 'running a batch failed', batch_id: e.batch.id, err });
        // An upstream batch running it is cancelled: nobody will read (and bill) its answers.
        await abandonUpstreamBatch(core, e.batch).catch(() => undefined);
        // Failed before its input was read: its lines are found by their holds.
        e.customIds ??= await heldLines(stores.billing, e.batch).catch(() => []);
        // What ran is kept (and was billed); the batch fails with the reason, and its hold goes.
        // Its end not written (the store failed meanwhile), it is not over: it runs again later.
        const message = err instanceof Error ? err.message.slice(0, 500) : 'The batch could not be run.';
        const ended = await finishBatch(core, e.batch, 'failed', [], [{ code: 'batch_failed', message, line: null, param: null }]).then(
          () => true,
          () => false,
        );
        if (!ended) {
          over = false;
          retryLater(e.batch.id);
        }
      })
      .then(async () => {
        owned.delete(e.batch.id);
        stopBeating();
        // Over: what the lines that never ran held goes back (a billed line's hold is closed
        // already). Stopped by shutdown or by the store: the next run takes it up.
        if (over && !core.stopping.aborted && e.customIds) await release(e.batch, e.customIds);
      });
    core.track(p);
  }

  /** Renews this instance's claim on its batches. */
  async function heartbeat(): Promise<void> {
    for (const e of owned.values()) {
      try {
        const b = await changeBatch(stores.batches, e.batch, (b) => (b.owner === me() ? { ...b, ownerUntil: core.jobs.ownerUntil() } : null));
        if (b) e.batch = b;
      } catch (err) {
        log.warn({ msg: 'batch renewal failed', batch_id: e.batch.id, err });
      }
    }
  }

  let sweeping = false;
  async function sweep(): Promise<void> {
    if (sweeping || core.stopping.aborted) return;
    sweeping = true;
    try {
      const unfinished = await stores.batches.unfinishedBatches();
      // A batch that ended (here or elsewhere) waits for nothing.
      const live = new Set(unfinished.map((b) => b.id));
      for (const id of retries.keys()) if (!live.has(id)) retries.delete(id);
      watch.keepOnly(live);
      for (const b of unfinished) {
        // A batch being cancelled, or past its window, is run (to its end) whatever it waits for.
        const due = b.status === 'cancelling' || seconds() >= b.expiresAt;
        // Seen on every sweep, a batch that waits included: its claim's age counts from its first sighting.
        const claimed = b.owner !== null && b.owner !== me() && !watch.lapsed(b.id, b.owner, b.ownerUntil);
        if (owned.has(b.id) || (waiting(b.id) && !due) || claimed) continue;
        const mine = await stores.batches.swapBatch({ ...b, owner: me(), ownerUntil: core.jobs.ownerUntil() });
        if (mine) own({ batch: mine, poked: false });
      }
    } catch (err) {
      log.warn({ msg: 'batch sweep failed', err });
    } finally {
      sweeping = false;
    }
  }

  const period = Math.max(50, Math.floor(ttl / 3));
  const beat = setInterval(() => void heartbeat(), period);
  const sweeper = setInterval(() => void sweep(), period);
  beat.unref();
  sweeper.unref();
  // A stopping instance adopts nothing more, but keeps its claim on the batches it runs until
  // their lines in flight end (the shutdown grace): lapsed, another instance could adopt a batch
  // and run those lines at the same time.
  const stopBeating = () => {
    if (core.stopping.aborted && owned.size === 0) clearInterval(beat);
  };
  core.stopping.addEventListener('abort', () => {
    clearInterval(sweeper);
    stopBeating();
  });

  return {
    start(batch) {
      own({ batch, poked: false });
    },
    release,
    poke(batchId) {
      // A cancel does not wait out a store error's wait: the batch is run (to its end) at the next sweep.
      retries.delete(batchId);
      const e = owned.get(batchId);
      if (e) e.poked = true;
    },
    sweep,
  };
}
