/**
 * POST /videos (JSON or multipart, relayed upstream in the encoding it came in) -> 202 with a
 * queued job; never synchronous. The gateway tracks the upstream job itself (tracker.ts), so
 * it completes, settles (seconds x tier price) and frees its slot with nobody polling.
 */
import { z } from 'zod';
import type { BilledCall } from '../../billing/meter.js';
import { listCost } from '../../billing/pricing.js';
import { chooseTier } from '../../billing/tiers.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import { errors, GatewayError } from '../../errors.js';
import { json } from '../../http/json.js';
import { jobView, newJobId } from '../../jobs/runner.js';
import type { JobRecord } from '../../stores/types.js';
import { callModel, pluginFields, upstreamError, upstreamHeaders } from '../../upstream/call.js';
import { openAmountCall } from '../../billing/billed-call.js';
import { takeSlot, unixSeconds } from '../media.js';
import { refuseAgentKeys, zodError } from '../shared.js';
import { DEFAULT_SECONDS, forUpstream, readSubmission } from './submission.js';
import { trackVideo } from './tracker.js';

const videoSchema = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1).max(32_000),
  seconds: z
    .union([z.int().min(1).max(120), z.string().regex(/^\d{1,3}$/, 'must be a whole number of seconds')])
    .optional(),
  size: z.string().optional(),
  resolution: z.string().optional(),
  mode: z.string().optional(),
});

export async function createVideo(core: Services, ctx: RequestContext): Promise<Response> {
  refuseAgentKeys(ctx);
  const sub = await readSubmission(ctx);
  const checked = videoSchema.safeParse(sub.fields);
  if (!checked.success) throw zodError(checked.error, sub.fields);
  const req = checked.data;
  const model = await core.catalog.resolve(req.model, ctx.key, 'video', () => core.grants(ctx.key.accountId));
  const seconds = req.seconds === undefined ? DEFAULT_SECONDS : Number(req.seconds);
  if (seconds < 1 || seconds > 120) {
    throw new GatewayError('invalid_request', "Invalid value for 'seconds': expected 1 to 120.", { param: 'seconds' });
  }
  const { tier } = chooseTier(model, req);

  const jobId = newJobId('video');
  const lease = await takeSlot(core, ctx, 'video', jobId);
  let upstreamJob: Record<string, unknown>;
  /** The upstream that accepted the job (the model's first target until one did). */
  let servedBy = model.upstream;
  let call: BilledCall | undefined;
  try {
    // A job any instance can finish: the hold lives as long as the job and survives shutdown.
    call = await openAmountCall(
      core,
      ctx,
      { id: jobId, model, amount: listCost(model, { kind: 'seconds', seconds, tier }), ttlMs: core.cfg.limits.jobTtlMs, durable: true },
      `${seconds} s of video at tier ${tier}`,
    );
    try {
      const answer = await callModel(core, ctx, model, async (served) => {
        const replaced = await pluginFields(core, ctx, served, '/videos', { ...sub.fields, model: served.upstreamModel });
        const out = await forUpstream(sub, served.upstreamModel, replaced);
        return { method: 'POST', path: '/videos', headers: upstreamHeaders(ctx.requestId, out.contentType), body: out.body };
      });
      const res = answer.res;
      servedBy = answer.served.upstream;
      if (res.status < 200 || res.status >= 300) throw await upstreamError(res, servedBy, { log: core.log, requestId: ctx.requestId });
      const parsed = JSON.parse(await res.text()) as unknown;
      if (!parsed || typeof parsed !== 'object' || typeof (parsed as { id?: unknown }).id !== 'string') {
        throw new GatewayError('upstream_error', `The upstream "${servedBy}" sent a malformed video job.`);
      }
      upstreamJob = parsed as Record<string, unknown>;
    } catch (err) {
      await call.cancel();
      throw err instanceof GatewayError ? err : new GatewayError('upstream_error', 'The video submission failed.', { cause: err });
    }
  } catch (err) {
    await core.jobs.drop(lease);
    throw err;
  }

  const now = core.now();
  const job: JobRecord = {
    id: jobId,
    object: 'video',
    accountId: ctx.key.accountId,
    keyId: ctx.key.id,
    model: model.id,
    status: 'queued',
    progress: 0,
    createdAt: unixSeconds(now),
    completedAt: null,
    expiresAt: unixSeconds(now + core.cfg.limits.jobTtlMs),
    error: null,
    result: null,
    prompt: req.prompt,
    seconds,
    size: req.size ?? req.resolution,
    holdId: jobId,
    leaseId: lease.leaseId,
    tier,
    upstreamJobId: upstreamJob.id as string,
    upstream: servedBy,
    owner: core.jobs.instanceId,
    ownerUntil: core.jobs.ownerUntil(),
  };
  try {
    await core.stores.jobs.create(job, core.cfg.limits.jobTtlMs);
  } catch (err) {
    // The upstream job runs on, but without a record nobody could poll or bill it: refund.
    await call.cancel();
    await core.jobs.drop(lease);
    throw errors.storeDown(err);
  }
  const billed = call;
  core.jobs.own(job, (j, signal) => trackVideo(core, j, signal, billed));
  return json(202, jobView(job), { location: `/v1/videos/${jobId}` });
}
