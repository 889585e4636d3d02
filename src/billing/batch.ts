/**
 * A batch's money (OpenAI's Batch API), on the same lifecycle as every call:
 *
 *   creation: one hold for the whole batch, the sum of its lines' worst cases at the batch
 *             price, placed atomically against the wallet, the key's cap and the budgets (402
 *             when it does not fit), with the batch's id as hold id;
 *   each line: billed once, by the one settle rule, under an id of its own (the batch's id and
 *             the line's custom id): the store closes that id at its settle, so a line run
 *             again after a crash is never charged twice. The line places no hold of its own
 *             (the batch's holds for it) and is not counted against the key's per-minute limits;
 *   the end:  the batch's hold is released, whatever its lines did not use.
 *
 * While the batch runs, its hold is renewed by the instance that runs it (an instance that
 * died stops renewing it, and the hold lapses within its TTL, as any call's does).
 */
import { atBatchPrice, type Model } from '../catalog/catalog.js';
import type { RequestContext } from '../pipeline/types.js';
import type { BatchRecord, BillingStore } from '../stores/types.js';
import { type BillingDoor, type BilledCall, openAmountCall } from './billed-call.js';
import type { Meter } from './meter.js';

/** The hold of a new batch (402 when it does not fit); `model` names it on the books. */
export function holdBatch(door: BillingDoor, ctx: RequestContext, batchId: string, model: Model, amount: bigint, ttlMs: number): Promise<BilledCall> {
  return openAmountCall(door, ctx, { id: batchId, model, amount, ttlMs, durable: true }, 'this batch (the worst case of all its lines, at the batch price)');
}

/** The id a line's charge is written under: one per batch and custom id. */
export function lineChargeId(batchId: string, customId: string): string {
  return `${batchId}:${customId}`;
}

/**
 * The billing door a line of `batch` runs through: its call is the line's own (no hold placed:
 * the batch holds for it), at the model's batch price, billed to the key that created the
 * batch. Everything else about the call is the ordinary path's.
 */
export function lineDoor(door: BillingDoor, batch: Pick<BatchRecord, 'id' | 'accountId' | 'keyId'>, customId: string): BillingDoor {
  const meter: Meter = {
    ...door.meter,
    async tryOpen(req) {
      const call = door.meter.resume({ id: lineChargeId(batch.id, customId), accountId: batch.accountId, keyId: batch.keyId, model: atBatchPrice(req.model) });
      return { ok: true, call };
    },
  };
  // A line already started finishes (its batch's hold covers it) even while the gateway drains.
  return { meter, draining: () => false };
}

/**
 * The call of a line an upstream batch already answered (its answer is billed by the one
 * settle rule, as the same call made directly would be), under the line's charge id.
 */
export function lineCall(door: BillingDoor, batch: Pick<BatchRecord, 'id' | 'accountId' | 'keyId'>, customId: string, model: Model): BilledCall {
  return door.meter.resume({ id: lineChargeId(batch.id, customId), accountId: batch.accountId, keyId: batch.keyId, model: atBatchPrice(model) });
}

/** Keeps a running batch's hold alive; false when it is gone (released, or lapsed). */
export function renewBatchHold(billing: Pick<BillingStore, 'renewHold'>, batch: Pick<BatchRecord, 'id' | 'accountId'>, ttlMs: number): Promise<boolean> {
  return billing.renewHold(batch.accountId, batch.id, ttlMs);
}

/**
 * Releases what the batch's hold still holds, once its lines are over (done, cancelled,
 * failed or expired): `open` is the call that placed it when this instance did.
 */
export function releaseBatchHold(meter: Meter, batch: Pick<BatchRecord, 'id' | 'accountId' | 'keyId'>, open?: BilledCall): Promise<void> {
  const call = open ?? meter.resume({ id: batch.id, accountId: batch.accountId, keyId: batch.keyId, model: undefined });
  return call.cancel();
}
