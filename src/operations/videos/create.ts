/**
 * POST /videos (JSON or multipart; the upstream gets what the gateway read, in the encoding
 * it came in) -> 202 with a queued job; never synchronous. The gateway tracks the upstream job itself (tracker.ts), so
 * it completes, settles (seconds x tier price) and frees its slot with nobody polling.
 */
import { z } from 'zod';
import type { BilledCall } from '../../billing/meter.js';
import { cost } from '../../billing/money.js';
import { priceText, tierPrice } from '../../billing/pricing.js';
import { chooseTier } from '../../billing/tiers.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import { errors, GatewayError } from '../../errors.js';
import type { Model } from '../../catalog/catalog.js';
import { json } from '../../http/json.js';
import { jobView } from '../../jobs/runner.js';
import type { JobRecord } from '../../stores/types.js';
import { upstreamError } from '../../upstream/answer-errors.js';
import { callModel, sameTarget, upstreamHeaders } from '../../upstream/call.js';
import { releaseCall, settleVideo } from '../../billing/settle.js';
import { fallbackFields, unixSeconds } from '../media.js';
import { jobOf, type MediaCall, mediaOperation, type TierPrice } from '../media-operation.js';
import { DEFAULT_SECONDS, DEFAULT_SIZE, forUpstream, type Submission } from './submission.js';
import { reportedSize, trackVideo } from './tracker.js';

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

export const createVideo = mediaOperation({
  path: '/videos',
  modality: 'video',
  schema: videoSchema,
  multipart: true,
  // The seconds asked at the tier's price per second, kept in the job's record: it is billed
  // at that price, whoever finishes it.
  price(_core, model, req) {
    const seconds = req.seconds === undefined ? DEFAULT_SECONDS : Number(req.seconds);
    if (seconds < 1 || seconds > 120) {
      throw new GatewayError('invalid_request', "Invalid value for 'seconds': expected 1 to 120.", { param: 'seconds' });
    }
    const { tier } = chooseTier(model, req);
    const unitPricePico = tierPrice(model, tier);
    return { amount: cost(unitPricePico, seconds), what: `${seconds} s of video at tier ${tier}`, count: seconds, tier, unitPricePico };
  },
  relay: 'job',
  run: startVideo,
});

async function startVideo(core: Services, ctx: RequestContext, m: MediaCall<z.infer<typeof videoSchema>, TierPrice>): Promise<Response> {
  const { model, req, sub } = m;
  const { count: seconds, tier, unitPricePico: unitPrice } = m.price;
  const { id: jobId, lease } = jobOf(m);
  let submitted: Submitted;
  try {
    submitted = await submit(core, ctx, model, sub, m.call, m.pluginsRan);
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
    // What the upstream renders: the guardrails' redaction, never the PII they took out.
    prompt: typeof sub.fields.prompt === 'string' ? sub.fields.prompt : req.prompt,
    seconds,
    size: req.size ?? req.resolution ?? submitted.size ?? DEFAULT_SIZE,
    holdId: jobId,
    leaseId: lease.leaseId,
    tier,
    heldUnitPrice: priceText(unitPrice),
    upstreamJobId: submitted.upstreamJobId,
    upstream: submitted.servedBy,
    owner: core.jobs.instanceId,
    ownerUntil: core.jobs.ownerUntil(),
  };
  const { call } = submitted;
  await record(core, job, call, unitPrice, () => core.jobs.drop(lease));
  // Recorded: whoever finishes the job finds it, so its hold now lasts the job's life (until
  // now it was the hold TTL's, lest an instance that died before the record lock the money).
  await call.keepFor?.(core.cfg.limits.jobTtlMs).catch((err: unknown) =>
    core.log.warn({ msg: "a video job's hold was not extended to the job's life; it is still billed in full", job_id: jobId, err: err instanceof Error ? err.message : String(err) }),
  );
  core.jobs.own(job, (j, signal) => trackVideo(core, j, signal, call));
  return json(202, jobView(job), { location: `/v1/videos/${jobId}` });
}

interface Submitted {
  call: BilledCall;
  upstreamJobId: string;
  /** The upstream that accepted the job. */
  servedBy: string;
  /** The size the upstream says it renders, when it says. */
  size: string | null;
}

/** Sends the submission upstream (the model's targets in turn); anything but an accepted job releases the hold and throws. */
async function submit(core: Services, ctx: RequestContext, model: Model, sub: Submission, call: BilledCall, pluginsRan: boolean): Promise<Submitted> {
  try {
    const answer = await callModel(core, ctx, model, async (served) => {
      // The own target's body went through the plugins before the hold (it is `sub`); a fallback's
      // goes now, and may change nothing but its model.
      const replaced = pluginsRan && sameTarget(served, model) ? null : await fallbackFields(core, ctx, served, '/videos', { ...sub.fields, model: served.upstreamModel });
      const out = await forUpstream(sub, served.upstreamModel, replaced);
      return { method: 'POST', path: '/videos', headers: upstreamHeaders(ctx.requestId, out.contentType), body: out.body };
      // A video the upstream may have accepted is never submitted twice (a second render runs for nobody).
    }, { once: true });
    const res = answer.res;
    const servedBy = answer.served.upstream;
    if (res.status < 200 || res.status >= 300) throw await upstreamError(res, servedBy, { log: core.log, requestId: ctx.requestId });
    const parsed = JSON.parse(await res.text()) as unknown;
    if (!parsed || typeof parsed !== 'object' || typeof (parsed as { id?: unknown }).id !== 'string') {
      throw new GatewayError('upstream_error', `The upstream "${servedBy}" sent a malformed video job.`);
    }
    const job = parsed as { id: string; size?: unknown };
    return { call, upstreamJobId: job.id, servedBy, size: reportedSize(job.size) };
  } catch (err) {
    await releaseCall(call);
    throw err instanceof GatewayError ? err : new GatewayError('upstream_error', 'The video submission failed.', { cause: err });
  }
}

/** Delays between the attempts to write an accepted job's record. */
const RECORD_RETRY_MS = [50, 250, 1000];

/**
 * Writes the record of a job the upstream accepted. The upstream renders an accepted job (and
 * charges the operator for it) whether or not the gateway keeps its record, so its hold is
 * never released here: refunding would make a job whose record cannot be written free, and
 * repeatable at the operator's cost. The write is retried a few times; if the store still
 * refuses it, the job is billed as held (the seconds asked, at the held price) through the
 * same billed call, whose charge lands in the store or, while the store is down, in the
 * durable settle journal. The client gets 503 (without a record it cannot poll the job) and
 * the log keeps the upstream's job id for the operator.
 */
async function record(core: Services, job: JobRecord, call: BilledCall, unitPrice: bigint, dropLease: () => Promise<void>): Promise<void> {
  let failure: unknown;
  for (let attempt = 0; attempt <= RECORD_RETRY_MS.length; attempt++) {
    try {
      await core.stores.jobs.create(job, core.cfg.limits.jobTtlMs);
      return;
    } catch (err) {
      failure = err;
      const wait = RECORD_RETRY_MS[attempt];
      if (wait !== undefined) await new Promise((r) => setTimeout(r, wait));
    }
  }
  core.log.error({
    msg: 'video job record not written; billed as held',
    job_id: job.id,
    upstream: job.upstream,
    upstream_job_id: job.upstreamJobId,
    err: failure instanceof Error ? failure.message : String(failure),
  });
  await settleVideo(call, null, job.seconds ?? DEFAULT_SECONDS, job.tier, { upstream: job.upstream ?? undefined, unitPricePico: unitPrice });
  await dropLease();
  throw errors.storeDown(failure);
}
