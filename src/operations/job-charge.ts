/**
 * Ending a media job that was paid for. The instance that finishes a job writes its result and
 * its charge into the record (still unfinished, its result not shown) before it charges, and
 * only while the job is still its own; then it charges, then completes the job. An instance
 * that adopts the job at any point after that first write does the same charge (a settle is
 * idempotent per hold id: it lands once, whoever makes it) and completes the job: a client is
 * never told a job failed or was lost after it was charged for it.
 */
import type { BilledCall } from '../billing/meter.js';
import { priceFromText } from '../billing/pricing.js';
import { settleImages, settleVideo } from '../billing/settle.js';
import { lapsedClaim, UNFINISHED } from '../jobs/runner.js';
import type { Services } from '../services.js';
import type { JobCharge, JobRecord } from '../stores/types.js';
import { unixSeconds } from './media.js';

/** Makes `charge` through `call` (the job's billed call, its own or resumed by an adopter). */
export function settleCharge(call: BilledCall, job: Pick<JobRecord, 'object' | 'tier'>, charge: JobCharge): Promise<void> {
  const unitPricePico = priceFromText(charge.unitPrice);
  const where = {
    upstream: charge.upstream ?? undefined,
    ...(unitPricePico === undefined ? {} : { unitPricePico }),
    ...(charge.entryId ? { entryId: charge.entryId } : {}),
  };
  return job.object === 'image'
    ? settleImages(call, charge.returned, charge.asked, job.tier, where)
    : settleVideo(call, charge.returned, charge.asked, job.tier, where);
}

/** The job's end once its charge landed: completed, its result shown, its charge forgotten. */
export function completeCharged(core: Services, jobId: string): Promise<JobRecord | null> {
  return core.stores.jobs.update(jobId, { status: 'completed', progress: 100, completedAt: unixSeconds(core.now()), charging: null }, UNFINISHED);
}

/**
 * Ends an adopted job whose charge its first instance recorded: the charge, then the job
 * completed. Not done by an instance whose catalog lacks the job's model: its call could only
 * release the hold, which would make the job free; another instance (or a restart with the
 * model) ends it.
 */
export async function endCharged(core: Services, job: JobRecord, call: BilledCall): Promise<boolean> {
  if (!job.charging || !core.catalog.get(job.model)) return false;
  await settleCharge(call, job, job.charging);
  await completeCharged(core, job.id);
  return true;
}

/**
 * Takes over a job whose claim lapsed, as the sweep read it: of instances that saw it lapse
 * together one wins, and none takes a job its owner renewed meanwhile. Null when another
 * instance has it, or when its charge was recorded (before the sweep read it, or since) and this
 * instance cannot bill its model: an instance that can completes it.
 */
export async function claimLapsed(core: Services, job: JobRecord): Promise<JobRecord | null> {
  const billable = core.catalog.get(job.model) !== undefined;
  if (job.charging && !billable) return null;
  const claimed = await core.stores.jobs.update(job.id, { owner: core.jobs.instanceId, ownerUntil: core.jobs.ownerUntil() }, UNFINISHED, lapsedClaim(job));
  return claimed && (billable || !claimed.charging) ? claimed : null;
}
