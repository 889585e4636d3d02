/**
 * The gateway's own poller of an upstream video job: it runs until the job is terminal, then
 * settles (the seconds the upstream reports) or refunds once, and frees the job's slot.
 */
import type { BilledCall } from '../../billing/meter.js';
import { releaseCall } from '../../billing/settle.js';
import type { Services } from '../../services.js';
import { JOB_ADOPTED, leasePool, UNFINISHED } from '../../jobs/runner.js';
import type { JobCharge, JobRecord } from '../../stores/types.js';
import { callUpstream, upstreamHeaders } from '../../upstream/call.js';
import { upstreamKeysRedactor } from '../../upstream/key-redactor.js';
import { pause } from '../../upstream/sleep.js';
import { completeCharged, endCharged, settleCharge } from '../job-charge.js';
import { unixSeconds } from '../media.js';
import { DEFAULT_SECONDS } from './submission.js';

/** Longest clip the gateway believes an upstream rendered; anything else is a malformed report. */
const MAX_REPORTED_SECONDS = 3600;

/**
 * The seconds to bill: what the upstream reports it rendered (in full, even past what was
 * asked and held), else the seconds requested.
 */
function reportedSeconds(value: unknown): number | null {
  const n = typeof value === 'string' && /^\d{1,5}$/.test(value) ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= MAX_REPORTED_SECONDS ? n : null;
}

/**
 * The size the upstream reports, when it looks like one ("WxH" or a tier name). Anything else
 * is not kept: text the job store cannot hold (a NUL on PostgreSQL) would make the completed
 * record unwritable, and the job would never be billed.
 */
export function reportedSize(value: unknown): string | null {
  return typeof value === 'string' && /^[A-Za-z0-9x]{1,32}$/.test(value) ? value : null;
}

/** Polls the upstream job until it is terminal; settles or refunds once (through `call`); frees the slot. */
export async function trackVideo(core: Services, job: JobRecord, signal: AbortSignal, call: BilledCall): Promise<void> {
  const model = core.catalog.get(job.model);
  const lease = { pool: leasePool('video', job.accountId), leaseId: job.leaseId };
  const fail = async (code: string, message: string) => {
    // Only while the job is this instance's: one that adopted it meanwhile ends it.
    const updated = await core.stores.jobs.update(
      job.id,
      { status: 'failed', completedAt: unixSeconds(core.now()), error: { code, message } },
      UNFINISHED,
      { owner: core.jobs.instanceId },
    );
    await endHere(updated !== null);
  };
  /**
   * After this instance failed the job (`ended`) or could not: a record that is gone was ended
   * too (the store forgets it when the job's life ends, which the expiry check, once a poll, can
   * come after), and its hold must not stay open, renewed for as long as this instance runs;
   * releasing a closed hold changes nothing. A job another instance adopted is left to it, its
   * slot with it.
   */
  const endHere = async (ended: boolean) => {
    if (ended || !(await core.stores.jobs.get(job.id))) {
      await releaseCall(call);
      await core.jobs.drop(lease);
    } else leave();
  };
  /** The job is another instance's to end: its call and slot are no longer kept here. */
  const leave = () => {
    call.leave?.();
    core.jobs.leave(lease);
  };
  // Its first instance recorded the finished video and its charge, then stopped: charged (once)
  // and completed, by an instance that can bill its model (another one, else).
  if (job.charging) return (await endCharged(core, job, call)) ? void (await core.jobs.drop(lease)) : leave();
  if (!model || !job.upstreamJobId) return fail('job_lost', 'The video job can no longer be tracked; nothing was charged.');
  const expiresAtMs = (job.expiresAt ?? Infinity) * 1000;
  // Polls go to the upstream that accepted the job: no other one knows its id.
  const upstreamName = job.upstream ?? model.upstream;

  // Stopped by this instance's runner when it finds the job adopted elsewhere (else by shutdown).
  const stopped = () => {
    if (signal.reason === JOB_ADOPTED) leave();
  };
  while (!signal.aborted) {
    await pause(core.cfg.limits.jobPollIntervalMs, signal);
    if (signal.aborted) return stopped();
    if (core.now() >= expiresAtMs) return fail('job_expired', 'The upstream did not finish the video before the job expired.');
    let upstream: Record<string, unknown>;
    try {
      const res = await callUpstream(core, upstreamName, {
        method: 'GET',
        path: `/videos/${encodeURIComponent(job.upstreamJobId)}`,
        headers: upstreamHeaders(job.id),
      });
      if (res.status === 404) return fail('upstream_job_not_found', 'The upstream no longer knows this video job.');
      if (res.status < 200 || res.status >= 300) {
        res.discard();
        continue;
      }
      upstream = JSON.parse(await res.text()) as Record<string, unknown>;
    } catch (err) {
      core.log.warn({ msg: 'video poll failed', job_id: job.id, err: err instanceof Error ? err.message : String(err) });
      continue;
    }
    const status = upstream.status;
    if (status === 'completed') {
      const reported = reportedSeconds(upstream.seconds);
      const seconds = reported ?? job.seconds ?? DEFAULT_SECONDS;
      // The charge lands before the finished job is visible: a client that can fetch the clip
      // has paid for it. Settling is idempotent per hold id, so an instance that raced this one
      // to the same job cannot charge it twice.
      // At the price the job was held at, not this instance's catalog price: the job may have
      // been adopted after a restart that changed it.
      const charging: JobCharge = { returned: reported, asked: job.seconds ?? DEFAULT_SECONDS, unitPrice: job.heldUnitPrice ?? null, upstream: upstreamName };
      const result = { url: `/v1/videos/${job.id}/content`, content_type: 'video/mp4', seconds, size: reportedSize(upstream.size) ?? job.size ?? null };
      // The result and its charge are recorded first, while the job is still this instance's
      // (an instance that adopted it meanwhile ends it); then the charge; then the job completes.
      const recorded = await core.stores.jobs.update(job.id, { progress: 100, result, charging }, UNFINISHED, { owner: core.jobs.instanceId });
      if (!recorded) return endHere(false);
      await settleCharge(call, job, charging);
      await completeCharged(core, job.id);
      await core.jobs.drop(lease);
      return;
    }
    if (status === 'failed') {
      const e = (upstream.error ?? {}) as { code?: unknown; message?: unknown };
      // The job's error is shown to the client: no upstream key material in it.
      const redact = upstreamKeysRedactor(core.cfg);
      return fail(
        typeof e.code === 'string' ? redact(e.code) : 'generation_failed',
        typeof e.message === 'string' ? redact(e.message) : 'The upstream failed to generate the video.',
      );
    }
    // A job the upstream ended without a video (cancelled on its side, expired there): no output,
    // nothing billed, its hold and slot freed now rather than at the job's TTL.
    if (status === 'cancelled' || status === 'canceled' || status === 'expired') {
      return fail(`upstream_${status}`, `The upstream ended the video job without a video (${status}).`);
    }
    const progress = typeof upstream.progress === 'number' ? Math.max(0, Math.min(99, Math.floor(upstream.progress))) : 0;
    await core.stores.jobs
      .update(job.id, { status: status === 'queued' ? 'queued' : 'in_progress', progress }, UNFINISHED)
      .catch(() => undefined);
  }
}
