/**
 * Media job lifecycle on one instance:
 * - in-flight slots are leases in the limit store, renewed while this instance works on them,
 *   so a crashed instance frees its slots within one lease TTL;
 * - video jobs are tracked against the upstream by the gateway itself, so they complete,
 *   settle and free their slot even when nobody polls;
 * - a sweeper adopts jobs whose owner stopped renewing: an image job is then `failed`
 *   (`job_lost`, its hold released: nothing is charged for lost work) and a video job is
 *   tracked to its end by this instance, and billed once; a job whose result and charge its
 *   owner recorded before it stopped is charged (once) and completed (operations/job-charge.ts).
 */
import { randomBytes } from 'node:crypto';
import { randomBase62 } from '../auth/keys.js';
import type { Logger } from '../observability/log.js';
import type { GatewayConfig } from '../options.js';
import type { JobClaim, JobRecord, JobStatus, Stores } from '../stores/types.js';
import { claimDeadlines, LeaseWatch } from './lease-watch.js';

export const UNFINISHED: JobStatus[] = ['queued', 'in_progress'];

/** Why a job's tracking was stopped when another instance adopted it (its signal's reason). */
export const JOB_ADOPTED = Symbol('job adopted elsewhere');

export interface LeaseRef {
  pool: string;
  leaseId: string;
}

export interface JobRunner {
  instanceId: string;
  /** Keeps a lease alive until `drop`. */
  keep(lease: LeaseRef): void;
  /** Stops renewing and releases the lease. */
  drop(lease: LeaseRef): Promise<void>;
  /** Stops renewing the lease, leaving it to the instance that took its job over. */
  leave(lease: LeaseRef): void;
  /**
   * The deadline to write on a claim this instance makes or renews (its clock plus the lease
   * TTL, later than any it wrote before). Other instances read it as a heartbeat only.
   */
  ownerUntil(): number;
  /** Tracks `job` (owned by this instance) with `track` until it is terminal. */
  own(job: JobRecord, track: (job: JobRecord, signal: AbortSignal) => Promise<void>): void;
  /** Registers how to adopt an orphaned job of a kind. */
  onOrphan(kind: JobRecord['object'], adopt: (job: JobRecord) => Promise<void>): void;
  /** Runs one sweep now (tests; the timer runs it periodically). */
  sweep(): Promise<void>;
  dispose(): void;
}

export function leasePool(kind: 'image' | 'video', accountId: string): string {
  return `${kind}:${accountId}`;
}

/** The claim an adoption of `job` (as the sweep read it) is conditioned on; none for a record that names no owner. */
export const lapsedClaim = (job: JobRecord): JobClaim | undefined =>
  job.owner ? { owner: job.owner, ...(job.ownerUntil === undefined ? {} : { ownerUntil: job.ownerUntil }) } : undefined;

/** What the runner uses of the gateway's services. */
export interface JobRunnerDeps {
  cfg: Pick<GatewayConfig, 'limits'>;
  stores: Pick<Stores, 'limits' | 'jobs'>;
  now(): number;
  log: Logger;
  /** Registers background work that `dispose()` waits for. */
  track(p: Promise<unknown>): void;
}

export function createJobRunner(core: JobRunnerDeps): JobRunner {
  const instanceId = `gw_${randomBytes(8).toString('hex')}`;
  const ttl = core.cfg.limits.inFlightLeaseTtlMs;
  const kept = new Map<string, LeaseRef>();
  const owned = new Map<string, AbortController>();
  const adopters = new Map<JobRecord['object'], (job: JobRecord) => Promise<void>>();
  const leaseKey = (l: LeaseRef) => `${l.pool}\u0000${l.leaseId}`;
  const deadline = claimDeadlines(core.now, ttl);
  const watch = new LeaseWatch(ttl, core.now);

  const renewAll = async () => {
    for (const l of kept.values()) {
      try {
        await core.stores.limits.renewLease(l.pool, l.leaseId, ttl);
      } catch (err) {
        core.log.warn({ msg: 'lease renewal failed', err });
      }
    }
    for (const [id, tracking] of owned) {
      try {
        // Renewed only while it is this instance's: one that was thought gone (a long pause, a
        // partition) may find its job adopted, and then stops tracking it rather than take it back.
        if (await core.stores.jobs.update(id, { owner: instanceId, ownerUntil: deadline() }, UNFINISHED, { owner: instanceId })) continue;
        const job = await core.stores.jobs.get(id);
        if (!job || job.owner === instanceId) continue;
        core.log.warn({ msg: 'job adopted by another instance; no longer tracked here', job_id: id, owner: job.owner });
        kept.delete(leaseKey({ pool: leasePool(job.object, job.accountId), leaseId: job.leaseId }));
        tracking.abort(JOB_ADOPTED);
      } catch (err) {
        core.log.warn({ msg: 'job ownership renewal failed', job_id: id, err });
      }
    }
  };

  let sweeping = false;
  const sweep = async () => {
    if (sweeping) return;
    sweeping = true;
    try {
      const jobs = await core.stores.jobs.listUnfinished();
      watch.keepOnly(new Set(jobs.map((j) => j.id)));
      for (const job of jobs) {
        if (owned.has(job.id) || !watch.lapsed(job.id, job.owner ?? null, job.ownerUntil ?? 0)) continue;
        const adopt = adopters.get(job.object);
        if (adopt) await adopt(job).catch((err) => core.log.warn({ msg: 'job adoption failed', job_id: job.id, err }));
      }
    } catch (err) {
      core.log.warn({ msg: 'job sweep failed', err });
    } finally {
      sweeping = false;
    }
  };

  const period = Math.max(50, Math.floor(ttl / 3));
  const renewTimer = setInterval(() => void renewAll(), period);
  const sweepTimer = setInterval(() => void sweep(), period);
  renewTimer.unref();
  sweepTimer.unref();

  return {
    instanceId,
    keep(lease) {
      kept.set(leaseKey(lease), lease);
    },
    async drop(lease) {
      kept.delete(leaseKey(lease));
      await core.stores.limits.releaseLease(lease.pool, lease.leaseId).catch((err) => {
        // The lease expires on its own within one TTL.
        core.log.warn({ msg: 'lease release failed', err });
      });
    },
    leave(lease) {
      kept.delete(leaseKey(lease));
    },
    ownerUntil: deadline,
    own(job, track) {
      if (owned.has(job.id)) return;
      // dispose() aborts every owned job's controller; no listener per job on the shutdown signal.
      const ac = new AbortController();
      owned.set(job.id, ac);
      const p = track(job, ac.signal)
        .catch((err) => core.log.warn({ msg: 'job tracking stopped', job_id: job.id, err }))
        .finally(() => owned.delete(job.id));
      core.track(p);
    },
    onOrphan(kind, adopt) {
      adopters.set(kind, adopt);
    },
    sweep,
    dispose() {
      clearInterval(renewTimer);
      clearInterval(sweepTimer);
      for (const ac of owned.values()) ac.abort();
    },
  };
}

/** The job object clients see: the OpenAI job fields, plus prompt, seconds and size for a video. */
export function jobView(job: JobRecord): Record<string, unknown> {
  const view: Record<string, unknown> = {
    id: job.id,
    object: job.object,
    model: job.model,
    status: job.status,
    progress: job.progress,
    created_at: job.createdAt,
    completed_at: job.completedAt,
    expires_at: job.expiresAt,
    error: job.error,
    // A finished job's result is recorded before its charge lands, and shown only once it has.
    result: job.status === 'completed' ? (job.result ?? null) : null,
  };
  if (job.object === 'video') {
    view.prompt = job.prompt ?? null;
    // A string, as OpenAI's video object (and its SDKs) type it.
    view.seconds = job.seconds === undefined ? null : String(job.seconds);
    view.size = job.size ?? null;
    // OpenAI's video object always names the video it remixes; the gateway makes no remixes.
    view.remixed_from_video_id = null;
  }
  return view;
}

/** Unguessable job ids: 32 base62 characters (about 190 bits). */
export function newJobId(kind: 'image' | 'video'): string {
  return `${kind === 'image' ? 'img' : 'video'}_${randomBase62(32)}`;
}
