/** What the media operations share: in-flight slots and job reads. */
import { GatewayError } from '../errors.js';
import { json } from '../http/json.js';
import { jobView, leasePool, type LeaseRef } from '../jobs/runner.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import type { JobRecord } from '../stores/types.js';
import type { Model } from '../catalog/catalog.js';
import { callModel, sameTarget, upstreamHeaders } from '../upstream/call.js';
import type { UpstreamResponse } from '../upstream/types.js';
import { pluginFields } from '../upstream/plugin-body.js';
import { canonical } from './hosted-tools.js';
import { refuseAgentKeys } from './shared.js';
import { shownId } from '../auth/keys.js';

/** Takes an in-flight slot for the account, or 429 without Retry-After (wait for a job instead). */
export async function takeSlot(core: Services, ctx: RequestContext, kind: 'image' | 'video', leaseId: string): Promise<LeaseRef> {
  await ctx.runKeyCheck();
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

/** Reads a job of the calling account; anyone else's (or an unknown id) is 404. */
export async function readJob(core: Services, ctx: RequestContext, kind: JobRecord['object']): Promise<JobRecord> {
  const id = ctx.params.id ?? '';
  const job = await core.stores.jobs.get(id);
  if (!job || job.object !== kind || job.accountId !== ctx.key.accountId) {
    throw new GatewayError('job_not_found', `No ${kind} job with id "${shownId(id)}".`, { param: 'id' });
  }
  return job;
}

export async function getJob(core: Services, ctx: RequestContext, kind: JobRecord['object']): Promise<Response> {
  refuseAgentKeys(ctx);
  return json(200, jobView(await readJob(core, ctx, kind)));
}

export const unixSeconds = (ms: number) => Math.floor(ms / 1000);

/**
 * Refuses (400, `param` naming the field) a top-level text field holding a NUL (U+0000).
 * PostgreSQL's jsonb cannot keep a NUL, so a job whose prompt holds one would be accepted and
 * rendered upstream and then fail to be recorded. The text fields of image and video requests
 * are refused on every driver alike, before any hold or upstream call, so a request means the
 * same whichever store the gateway runs on.
 */
export function refuseNul(fields: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === 'string' && value.includes('\u0000')) {
      throw new GatewayError('invalid_request', `Invalid value for '${name.slice(0, 100)}': it contains a NUL character (U+0000).`, {
        param: name.slice(0, 100),
      });
    }
  }
}

/**
 * Sends a media request's JSON body through the model's targets (retries, fallbacks, the
 * plugins' say on the body): the client's bytes as they came to a target named like the model,
 * else the body naming the target's model.
 */
export function callModelWithBody(
  core: Services,
  ctx: RequestContext,
  model: Model,
  path: string,
  body: Record<string, unknown>,
  bytes: Uint8Array | string,
  signal: AbortSignal,
  pluginsRan = false,
  /** A streamed answer's first read, taken inside its attempt (see callModel). */
  begin?: (res: UpstreamResponse) => Promise<void>,
) {
  return callModel(core, ctx, model, async (served) => {
    const fields = { ...body, model: served.upstreamModel };
    const raw = served.upstreamModel === model.id ? bytes : JSON.stringify(fields);
    // The model's own target gets the body the plugins already left (priced and held on it),
    // without a second run of them; a fallback target's body goes through them now, and may
    // change nothing but its model: what it costs was priced and held on the own target's.
    const replaced = pluginsRan && sameTarget(served, model) ? null : await fallbackFields(core, ctx, served, path, fields);
    return { method: 'POST' as const, path, headers: upstreamHeaders(ctx.requestId), body: replaced ? JSON.stringify(replaced) : raw, signal };
  }, begin ? { begin } : {});
}

/**
 * The plugins' body for a media call's fallback target (null: unchanged). It may change nothing
 * but its model: what the call costs was priced and held on the model's own target's body.
 */
export async function fallbackFields(core: Services, ctx: RequestContext, served: Model, path: string, fields: Record<string, unknown>): Promise<Record<string, unknown> | null> {
  const replaced = await pluginFields(core, ctx, served, path, fields);
  if (replaced && canonical({ ...replaced, model: null }) !== canonical({ ...fields, model: null })) {
    throw new GatewayError('internal_error', `A plugin's onUpstreamRequest changed a ${path} request for a fallback target: its price was held on the model's own target's body.`);
  }
  return replaced;
}
