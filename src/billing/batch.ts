/**
 * A batch's money (OpenAI's Batch API), on the same lifecycle as every call:
 *
 *   creation: each line's worst case at the batch price is held under the line's own id (the
 *             batch's id and the line's custom id), checked against the wallet, the key's cap
 *             and the budgets like any hold. The batch is held whole or not at all: when one
 *             line's hold is refused, the ones placed are released and the batch gets the 402;
 *   each line: billed once, by the one settle rule, settling its own hold: the store closes that
 *             id at its settle, so a line run again after a crash is never charged twice, and
 *             what the batch holds shrinks by each line's worst case as the line is billed;
 *   the end:  the holds of the lines that never ran (cancelled, expired, failed) are released.
 *
 * A line's hold is placed for the ordinary hold TTL, and made to last the batch's completion
 * window once the batch is recorded, by the instance that runs it (each run, an adopter's too,
 * renews the holds of the lines not yet recorded to the window's end). An instance that dies
 * between placing the holds and recording the batch leaves no batch to release them: they
 * lapse within the hold TTL, not a day later. A recorded batch is always finished by some
 * instance (one that dies has its batches adopted), which settles or releases every line's hold.
 */
import { atBatchPrice, type Model } from '../catalog/catalog.js';
import { errors } from '../errors.js';
import type { RequestContext } from '../pipeline/types.js';
import type { BatchRecord, BillingStore, HeldTextPrices } from '../stores/types.js';
import type { BillingDoor, BilledCall } from './billed-call.js';
import { readHolds } from './audit-read.js';
import { insufficientQuota, type Meter } from './meter.js';
import { formatUsd } from './money.js';

/** How long a batch may run (its `completion_window`, OpenAI's only one): its lines' holds last as long. */
export const BATCH_WINDOW_MS = 24 * 60 * 60 * 1000;

/** The id a line's hold and charge go under: one per batch and custom id. */
export function lineChargeId(batchId: string, customId: string): string {
  return `${batchId}:${customId}`;
}

type BatchRef = Pick<BatchRecord, 'id' | 'accountId' | 'keyId' | 'prices'>;

/** A model's batch text prices as a batch keeps them. */
export function heldPricesOf(model: Model): HeldTextPrices | null {
  const text = atBatchPrice(model).text;
  if (!text) return null;
  return {
    prompt: String(text.promptPico),
    completion: String(text.completionPico),
    cachedPrompt: String(text.cachedPromptPico),
    cacheWrite: String(text.cacheWritePico),
    cacheWrite1h: String(text.cacheWrite1hPico),
    ...(model.toolPrices ? { tools: Object.fromEntries([...model.toolPrices].map(([tool, price]) => [tool, String(price)])) } : {}),
  };
}

/**
 * `model` at the batch price `batch` held its lines at: a line is billed at the price it was
 * held at, as a job is, whatever the model's price is now.
 */
function atHeldPrice(model: Model, batch: BatchRef): Model {
  const priced = atBatchPrice(model);
  const held = batch.prices?.[model.id];
  if (!held || !priced.text) return priced;
  // The tools priced then, and only those (a tool priced since was free when it was held).
  const { toolPrices: _now, ...rest } = priced;
  return {
    ...rest,
    text: {
      promptPico: BigInt(held.prompt),
      completionPico: BigInt(held.completion),
      cachedPromptPico: BigInt(held.cachedPrompt),
      cacheWritePico: BigInt(held.cacheWrite),
      cacheWrite1hPico: BigInt(held.cacheWrite1h),
    },
    ...(held.tools ? { toolPrices: new Map(Object.entries(held.tools).map(([tool, price]) => [tool, BigInt(price)])) } : {}),
  };
}

/** At most this many holds are placed (or released) at once for one batch. */
const AT_ONCE = 128;

/**
 * Runs `work` over `items`, AT_ONCE at a time, until one says false or throws: then no more
 * start, and once those under way have ended it returns false, or throws the first error. (A
 * throw that returned at once would leave the others placing holds nobody releases.)
 */
async function eachAtOnce<T>(items: readonly T[], work: (t: T) => Promise<boolean>): Promise<boolean> {
  let next = 0;
  let ok = true;
  let failure: { err: unknown } | null = null;
  const worker = async () => {
    while (ok && next < items.length) {
      try {
        if (!(await work(items[next++]!))) ok = false;
      } catch (err) {
        failure ??= { err };
        ok = false;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, items.length) }, worker));
  if (failure) throw (failure as { err: unknown }).err;
  return ok;
}

/** How a new batch's holds are placed: for `ttlMs`, kept alive through `store` while the rest are placed. */
export interface BatchHoldTerms {
  ttlMs: number;
  store: Pick<BillingStore, 'renewHold'>;
  now(): number;
}

/**
 * Holds every line of a new batch (`amounts`: each custom id's worst case at the batch price),
 * or none: a refusal releases what was placed and throws the 402.
 */
export async function holdBatch(door: BillingDoor, ctx: RequestContext, batchId: string, model: Model, amounts: ReadonlyMap<string, bigint>, terms: BatchHoldTerms): Promise<void> {
  if (door.draining()) throw errors.shuttingDown();
  await ctx.runKeyCheck();
  const accountBudgets = door.accountBudgets ? await door.accountBudgets(ctx.key.accountId) : [];
  const { ttlMs } = terms;
  const placed: string[] = [];
  // What the lines placed so far hold: the refusal's room is what was left beside those
  // placed before it (a hold that lands after it is not in its room, so not counted back).
  let placedAmount = 0n;
  let placedBeforeRefusal = 0n;
  let refusal: Awaited<ReturnType<Meter['place']>> | null = null;
  const lines = [...amounts];
  const batch = { id: batchId, accountId: ctx.key.accountId, keyId: ctx.key.id };
  // A batch whose placing outlasts a third of the TTL (a short TTL, a slow store) renews what
  // it placed so far: a hold that lapsed while the rest were placed would have let them be
  // checked against money the batch still needs. One worker renews them, as many at once as are
  // placed at once, while the others go on placing; a renewal that fails is left to lapse.
  let renewedAt = terms.now();
  let renewing = false;
  const keepPlaced = async () => {
    if (renewing || terms.now() - renewedAt < ttlMs / 3) return;
    renewing = true;
    renewedAt = terms.now();
    try {
      await eachAtOnce(placed.slice(), (id) => terms.store.renewHold(batch.accountId, id, ttlMs).then(() => true, () => true));
    } finally {
      renewing = false;
    }
  };
  let ok: boolean;
  try {
    ok = await eachAtOnce(lines, async ([customId, amount]) => {
      await keepPlaced();
      const id = lineChargeId(batchId, customId);
      const r = await door.meter.place({ id, key: ctx.key, model, amount, ttlMs, accountBudgets });
      if (r.ok) {
        placed.push(id);
        placedAmount += amount;
      } else if (!refusal) {
        refusal = r;
        placedBeforeRefusal = placedAmount;
      }
      return r.ok;
    });
  } catch (err) {
    // The store failed part way: what was placed is released (best effort), not left for a day.
    await releaseLines(door.meter, batch, placed).catch(() => undefined);
    throw err;
  }
  if (ok) return;
  await releaseLines(door.meter, batch, placed);
  const r = refusal as unknown as Extract<Awaited<ReturnType<Meter['place']>>, { ok: false }>;
  const total = lines.reduce((sum, [, a]) => sum + a, 0n);
  // What could be spent without this batch: the room left at the refusal, plus what its own
  // lines held then (released above), not the crumbs its earlier lines left.
  const available = r.available + placedBeforeRefusal;
  throw insufficientQuota(
    { ...r, available },
    `This request requires more credits: this batch costs up to ${formatUsd(total)} USD (the worst case of all its lines, at the batch price), but only ${formatUsd(available)} USD can be spent.`,
  );
}

/** A line's billing door, and whether its call settled (billed or released) its hold. */
export interface LineDoor extends BillingDoor {
  settled(): boolean;
}

/**
 * The billing door a line of `batch` runs through: its call settles the line's own hold (at
 * the model's batch price, to the key that created the batch) instead of placing one, and is
 * not counted against the key's per-minute limits. Everything else about the call is the
 * ordinary path's.
 *
 * A line `cut` (this instance stops, its grace period over) settles nothing from then on: its
 * hold stays open, and the instance that adopts the batch runs the line again and settles it
 * then. Settled as cut (a client that left), the hold would close, and the re-run would be
 * charged nothing.
 */
export function lineDoor(door: BillingDoor, batch: BatchRef, customId: string, cut?: AbortSignal): LineDoor {
  let call: BilledCall | null = null;
  const meter: Meter = {
    ...door.meter,
    async tryOpen(req) {
      call = lineCall(door, batch, customId, req.model);
      return { ok: true, call: cut ? uncutSettles(call, cut) : call };
    },
  };
  // A line already started finishes (its hold is placed) even while the gateway drains.
  return { meter, draining: () => false, settled: () => call?.closed === true };
}

/** `call`, whose bill and cancel do nothing once `cut` aborted. */
function uncutSettles(call: BilledCall, cut: AbortSignal): BilledCall {
  return {
    id: call.id,
    accountId: call.accountId,
    held: call.held,
    get closed() {
      return call.closed;
    },
    bill: (units, measured, options) => (cut.aborted ? Promise.resolve() : call.bill(units, measured, options)),
    cancel: () => (cut.aborted ? Promise.resolve() : call.cancel()),
    onAbort: (stop) => call.onAbort(stop),
  };
}

/** The call of one line (an upstream batch answered it, or it runs now), on the line's hold. */
export function lineCall(door: BillingDoor, batch: BatchRef, customId: string, model: Model): BilledCall {
  return door.meter.resume({ id: lineChargeId(batch.id, customId), accountId: batch.accountId, keyId: batch.keyId, model: atHeldPrice(model, batch) });
}

/** Releases every hold of `ids`: one that fails does not stop the others (the first failure is thrown after). */
async function releaseLines(meter: Meter, batch: BatchRef, ids: readonly string[]): Promise<void> {
  let failure: { err: unknown } | null = null;
  await eachAtOnce(ids, async (id) => {
    await meter
      .resume({ id, accountId: batch.accountId, keyId: batch.keyId, model: undefined })
      .cancel()
      .catch((err: unknown) => void (failure ??= { err }));
    return true;
  });
  if (failure) throw (failure as { err: unknown }).err;
}

/**
 * The custom ids of `batch`'s lines that still hold something, read from the account's holds
 * (each line's hold is under the batch's id): what lets a batch whose input file is gone (the
 * list of its lines) release them, rather than leave them for its completion window.
 */
export async function heldLines(store: Pick<BillingStore, 'listHolds'>, batch: BatchRef): Promise<string[]> {
  const prefix = lineChargeId(batch.id, '');
  const { holds } = await readHolds(store, batch.accountId);
  // A hold a paged listing gave twice (Redis's scan may) is one line.
  return [...new Set(holds.filter((h) => h.holdId.startsWith(prefix)).map((h) => h.holdId.slice(prefix.length)))];
}

/**
 * Makes the holds of `customIds` (lines of a recorded batch, not yet run) last until `untilMs`,
 * the batch's window end. A hold already gone (its line settled, or it lapsed while no instance
 * ran the batch) stays gone: its line is still billed in full when it runs. Returns how many
 * holds were gone, and how many could not be renewed because the store failed.
 */
export async function keepBatchLines(
  store: Pick<BillingStore, 'renewHold'>,
  batch: BatchRef,
  customIds: readonly string[],
  untilMs: number,
  now: number,
): Promise<{ gone: number; failed: number }> {
  const ttlMs = untilMs - now;
  const out = { gone: 0, failed: 0 };
  if (ttlMs <= 0) return out;
  await eachAtOnce(customIds, async (c) => {
    const kept = await store.renewHold(batch.accountId, lineChargeId(batch.id, c), ttlMs).catch(() => null);
    if (kept === null) out.failed++;
    else if (!kept) out.gone++;
    return true;
  });
  return out;
}

/**
 * Releases the holds of the lines that will not run (the batch is over: done, cancelled,
 * failed or expired). A line already billed is closed: its release changes nothing.
 */
export function releaseBatchLines(meter: Meter, batch: BatchRef, customIds: readonly string[]): Promise<void> {
  return releaseLines(
    meter,
    batch,
    customIds.map((c) => lineChargeId(batch.id, c)),
  );
}
