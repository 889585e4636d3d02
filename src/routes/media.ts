/** What the media routes share: the agent-key refusal, in-flight slots, holds, job reads. */
import { type BilledCall, insufficientQuota } from '../billing/meter.js';
import type { Model } from '../catalog/catalog.js';
import type { Services, RequestContext } from '../services.js';
import { GatewayError } from '../errors.js';
import { json } from '../http/json.js';
import { jobView, leasePool, type LeaseRef } from '../jobs/runner.js';
import { formatUsd } from '../billing/money.js';
import type { JobRecord } from '../stores/types.js';

export function refuseAgentKeys(ctx: RequestContext): void {
  if (ctx.key.kind === 'agent') {
    throw new GatewayError('permission_denied', 'Agent keys cannot use media endpoints.');
  }
}

/** Takes an in-flight slot for the account, or 429 without Retry-After (wait for a job instead). */
export async function takeSlot(core: Services, ctx: RequestContext, kind: 'image' | 'video', leaseId: string): Promise<LeaseRef> {
  await core.runKeyCheck(ctx.requestId);
  const pool = leasePool(kind, ctx.key.accountId);
  const cap = kind === 'image' ? core.cfg.limits.inFlightImageJobs : core.cfg.limits.inFlightVideoJobs;
  const ok = await core.stores.limits.acquireLease(pool, cap, leaseId, core.cfg.limits.inFlightLeaseTtlMs);
  if (!ok) {
    const limit = kind === 'image' ? 'in_flight_image_jobs' : 'in_flight_video_jobs';
    throw new GatewayError(
      'rate_limit_exceeded',
      `Too many ${kind} jobs in flight for this account (at most ${cap}). Wait for one to finish.`,
      { metadata: { limit } },
    );
  }
  const lease = { pool, leaseId };
  core.jobs.keep(lease);
  return lease;
}

/** Opens the billed call of a media request, holding `amount`; a refusal is 402 naming the price. */
export async function holdMedia(
  core: Services,
  ctx: RequestContext,
  hold: { id: string; model: Model; amount: bigint; ttlMs?: number; durable?: boolean },
  what: string,
): Promise<BilledCall> {
  const { amount } = hold;
  return core.meter.open({ ...hold, key: ctx.key, observed: ctx.observed }, (refused) =>
    insufficientQuota(
      refused,
      `This request requires more credits: ${what} costs ${formatUsd(amount)} USD, but only ${formatUsd(refused.available)} USD can be spent.` +
        (refused.limitSource === 'key_monthly_cap' ? " (limited by this key's monthly spending cap)" : ''),
    ),
  );
}

/** Reads a job of the calling account; anyone else's (or an unknown id) is 404. */
export async function readJob(core: Services, ctx: RequestContext, kind: JobRecord['object']): Promise<JobRecord> {
  const id = ctx.params.id ?? '';
  const job = await core.stores.jobs.get(id);
  if (!job || job.object !== kind || job.accountId !== ctx.key.accountId) {
    throw new GatewayError('job_not_found', `No ${kind} job with id "${id}".`, { param: 'id' });
  }
  return job;
}

export async function getJob(core: Services, ctx: RequestContext, kind: JobRecord['object']): Promise<Response> {
  refuseAgentKeys(ctx);
  return json(200, jobView(await readJob(core, ctx, kind)));
}

export const unixSeconds = (ms: number) => Math.floor(ms / 1000);
