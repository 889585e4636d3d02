/**
 * Running a batch's lines on the gateway itself (any upstream without a Batch API, the
 * simulator included): each line is the same call made directly, through the ordinary billed
 * path, with the batch's price and its own charge id (see billing/batch.ts), at most
 * `limits.batchConcurrency` at a time. A line's outcome is recorded once; lines already
 * recorded (before a restart) are not run again.
 */
import { lineDoor } from '../../billing/batch.js';
import { isGatewayError } from '../../errors.js';
import type { Services } from '../../services.js';
import type { ApiKeyRecord, BatchRecord } from '../../stores/types.js';
import { changeBatch } from './change.js';
import { answeredLine } from './finish.js';
import { BATCH_ENDPOINTS } from './create.js';
import { type BatchInputLine, lineContext } from './input.js';
import { newLineId } from './views.js';

/** What a running batch tells its lines: whether to start another. */
export interface Running {
  batch: BatchRecord;
  /** True once no new line may start (cancelled, expired, or this instance is stopping). */
  stopping(): Promise<boolean>;
}

/**
 * Runs one line and records its outcome (the output line, or the error line). A line `cut`, or
 * failed while the gateway stops, before its call settled is not recorded: its hold is still
 * open, and the instance that adopts the batch runs it again.
 */
async function runLine(core: Services, run: Running, key: ApiKeyRecord, l: BatchInputLine, cut: AbortSignal): Promise<void> {
  const { batch } = run;
  const op = BATCH_ENDPOINTS[batch.endpoint]!;
  const requestId = newLineId();
  // The ordinary path, but billed as a line of the batch (at its price, on its own hold) and
  // outside the key's token limit; never answered from the response cache, whose hit is a
  // charge of its own and not the line's.
  const door = lineDoor(core, batch, l.customId, cut);
  const lineCore: Services = { ...core, meter: door.meter, draining: door.draining, tokenLimiter: undefined as unknown as Services['tokenLimiter'], cache: null };
  // Not settled while this instance stops: left to the instance that adopts the batch.
  const abandoned = () => (cut.aborted || core.stopping.aborted) && !door.settled();
  let status: number;
  let body: unknown;
  try {
    const res = await op.run(lineCore, lineContext(key, batch.endpoint, requestId, l.body, cut));
    status = res.status;
    const text = await res.text();
    body = JSON.parse(text) as unknown;
  } catch (err) {
    // Cut, or refused because the gateway is stopping (a guardrail check), before it settled.
    if (abandoned()) return;
    if (isGatewayError(err)) {
      status = err.status;
      body = err.toJSON();
    } else {
      core.log.error({ msg: 'a batch line failed', batch_id: batch.id, custom_id: l.customId, err });
      status = 500;
      body = { error: { message: 'The line failed inside the gateway.', type: 'internal_error', code: 'internal_error', param: null } };
    }
  }
  if (abandoned()) return;
  const record = answeredLine(requestId, l.customId, l.line, status, body);
  const { ok } = record;
  if (!(await core.stores.batches.addLine(batch.accountId, batch.id, record))) return;
  // The counts are progress for whoever polls: the batch's end counts its recorded lines anew.
  // So a count that loses too many races with the other lines' is left to that, rather than
  // failing a batch whose line is recorded (and billed).
  await changeBatch(core.stores.batches, batch, (b) => ({
    ...b,
    requestCounts: { ...b.requestCounts, completed: b.requestCounts.completed + (ok ? 1 : 0), failed: b.requestCounts.failed + (ok ? 0 : 1) },
  })).catch((err: unknown) => core.log.warn({ msg: 'a batch line count was not written', batch_id: batch.id, custom_id: l.customId, err }));
}

/** Why a line was cut. */
const shuttingDown = () => new Error('the gateway is shutting down');

/**
 * Runs every line not yet recorded, until done or stopped. When this instance stops, the lines
 * running get its grace period to finish, as calls do; then they are cut (left to the next owner).
 */
export async function runLines(core: Services, run: Running, key: ApiKeyRecord, lines: BatchInputLine[]): Promise<void> {
  const done = new Set((await core.stores.batches.lines(run.batch.accountId, run.batch.id)).map((l) => l.customId));
  const queue = lines.filter((l) => !done.has(l.customId));
  // One signal per line (a Request keeps a listener on its signal until it is collected).
  const live = new Set<AbortController>();
  let cutting = false;
  let graceTimer: NodeJS.Timeout | undefined;
  const onShutdown = () => {
    graceTimer = setTimeout(() => {
      cutting = true;
      for (const c of live) c.abort(shuttingDown());
    }, core.cfg.shutdownGraceMs);
    graceTimer.unref();
  };
  if (core.stopping.aborted) onShutdown();
  else core.stopping.addEventListener('abort', onShutdown, { once: true });
  let next = 0;
  // One worker failing (the store could not take a line's record) stops the others from
  // starting lines, and the run ends only once the lines in flight have: its owner decides
  // what happens to the batch when none of its lines is still running.
  let broken = false;
  const worker = async () => {
    while (!broken && next < queue.length && !(await run.stopping())) {
      const l = queue[next++]!;
      const cut = new AbortController();
      if (cutting) cut.abort(shuttingDown());
      live.add(cut);
      try {
        await runLine(core, run, key, l, cut.signal);
      } catch (err) {
        broken = true;
        throw err;
      } finally {
        live.delete(cut);
      }
    }
  };
  try {
    const ended = await Promise.allSettled(Array.from({ length: Math.min(core.cfg.limits.batchConcurrency, queue.length) }, worker));
    const failed = ended.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  } finally {
    core.stopping.removeEventListener('abort', onShutdown);
    clearTimeout(graceTimer);
  }
}
