/** Adoption of video jobs whose instance stopped renewing them (a crash, a deploy). */
import type { Services } from '../../services.js';
import { leasePool } from '../../jobs/runner.js';
import { claimLapsed } from '../job-charge.js';
import type { JobRecord } from '../../stores/types.js';
import { trackVideo } from './tracker.js';

/** Adopts a video job whose instance stopped renewing it, and tracks it to its end. */
export function adoptVideo(core: Services): (job: JobRecord) => Promise<void> {
  return async (job) => {
    const updated = await claimLapsed(core, job);
    if (!updated) return;
    // Its slot lease may have expired with the old owner; keep it alive again while we track.
    await core.stores.limits
      .acquireLease(leasePool('video', job.accountId), Number.MAX_SAFE_INTEGER, job.leaseId, core.cfg.limits.inFlightLeaseTtlMs)
      .catch(() => undefined);
    core.jobs.keep({ pool: leasePool('video', job.accountId), leaseId: job.leaseId });
    const call = core.meter.resume({
      id: job.holdId,
      accountId: job.accountId,
      keyId: job.keyId,
      model: core.catalog.get(job.model),
      durable: true,
    });
    // The tracker bills at the price kept in the record (the one the job was held at), not at
    // this instance's catalog price, which a rolling restart may have changed.
    core.jobs.own(updated, (j, signal) => trackVideo(core, j, signal, call));
  };
}
