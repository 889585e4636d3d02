/**
 * POST /images/generations: 200 with the images when the upstream answers within the inline
 * deadline, else 202 with a job (Location: /v1/images/{id}) while the call goes on and its
 * result lands in the job. GET /images/{id} polls it. Billed n x tier price, once.
 */
import { z } from 'zod';
import { cost } from '../billing/money.js';
import { priceText, tierPrice } from '../billing/pricing.js';
import { chooseTier } from '../billing/tiers.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import { errors, GatewayError } from '../errors.js';
import { json, jsonText } from '../http/json.js';
import { jobView, leasePool, UNFINISHED, type LeaseRef } from '../jobs/runner.js';
import type { JobCharge, JobClaim, JobRecord } from '../stores/types.js';
import { upstreamError } from '../upstream/answer-errors.js';
import { sleep } from '../upstream/sleep.js';
import { isStoreUnavailable } from '../stores/errors.js';
import { releaseCall, settleImages } from '../billing/settle.js';
import type { Model } from '../catalog/catalog.js';
import { refuseIfClosed } from '../billing/billed-call.js';
import { callModelWithBody, unixSeconds } from './media.js';
import { jobOf, type MediaCall, mediaOperation, type TierPrice } from './media-operation.js';
import { claimLapsed, endCharged } from './job-charge.js';

const imageSchema = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1).max(32_000),
  n: z.int().min(1).max(10).nullable().optional(),
  size: z.string().nullable().optional(),
  resolution: z.string().nullable().optional(),
  quality: z.string().nullable().optional(),
  response_format: z.enum(['url', 'b64_json']).nullable().optional(),
  // Streamed images (partial renders as events) are not relayed: refused before the upstream
  // renders them (it would, and the answer it streams could be neither read nor billed).
  stream: z.literal(false, { error: 'streamed images are not supported: leave out stream (or set it to false)' }).nullable().optional(),
  partial_images: z.literal(0, { error: 'partial images come only with a stream, which is not supported' }).nullable().optional(),
});

type Outcome = { ok: true; body: Record<string, unknown>; text: string } | { ok: false; err: GatewayError };

export const createImage = mediaOperation({
  path: '/images/generations',
  modality: 'image',
  schema: imageSchema,
  // n images at the tier's price, billed at the price it was held at (an image job is billed
  // by the instance that held it).
  price(_core, model, req) {
    const { tier } = chooseTier(model, req);
    const n = req.n ?? 1;
    const unitPricePico = tierPrice(model, tier);
    return { amount: cost(unitPricePico, n), what: `${n} image(s) at tier ${tier}`, count: n, tier, unitPricePico };
  },
  relay: 'inline-or-job',
  run: generateImages,
});

async function generateImages(core: Services, ctx: RequestContext, m: MediaCall<z.infer<typeof imageSchema>, TierPrice>): Promise<Response> {
  const { model, call } = m;
  const { count: n, tier, unitPricePico } = m.price;
  const { id: jobId, lease } = jobOf(m);
  // The hold and an inline answer's ledger entry carry the request id; a job's entry, its job id.
  let ledgerId = ctx.requestId;

  /** The upstream that serves the call (the model's first target until one answered). */
  let servedBy = model.upstream;
  // Billed for the images the upstream returned (at most n), else nothing.
  const finish = async (outcome: Outcome): Promise<void> => {
    if (outcome.ok) {
      const data = outcome.body.data;
      await settleImages(call, Array.isArray(data) ? data.length : null, n, tier, { entryId: ledgerId, upstream: servedBy, unitPricePico });
    } else {
      await releaseCall(call);
    }
    await core.jobs.drop(lease);
  };

  const abort = new AbortController();
  const onClientGone = () => abort.abort(new Error('client disconnected'));
  ctx.request.signal?.addEventListener('abort', onClientGone, { once: true });
  // Shutdown's grace period is over: the generation is abandoned and nothing is charged.
  call.onAbort(() => abort.abort(errors.shuttingDown()));

  const work = generate(core, ctx, model, m.sub.fields, m.sub.body, abort.signal, (name) => void (servedBy = name), m.pluginsRan);

  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), core.cfg.limits.inlineImageDeadlineMs);
  });
  const first = await Promise.race([work, deadline]);
  clearTimeout(timer);

  if (first !== 'deadline') {
    ctx.request.signal?.removeEventListener('abort', onClientGone);
    // Shutdown released the call while the images were on their way: they are not delivered.
    refuseIfClosed(call);
    await finish(first);
    if (!first.ok) throw first.err;
    return jsonText(200, first.text);
  }

  // Past the deadline: the call goes on without the client; its result lands in a job.
  ctx.request.signal?.removeEventListener('abort', onClientGone);
  ledgerId = jobId;
  // What the job is charged once its images are in, as `finish` charges them.
  const chargeOf = (body: Record<string, unknown>): JobCharge => ({
    returned: Array.isArray(body.data) ? body.data.length : null,
    asked: n,
    unitPrice: priceText(unitPricePico),
    upstream: servedBy,
    entryId: jobId,
  });
  return asJob(core, ctx, { jobId, model: model.id, tier, leaseId: lease.leaseId }, work, finish, chargeOf, () => abort.abort(), () => call.closed);
}

/** The upstream call of an image request: its parsed answer, or the error it ended with (never thrown). */
async function generate(
  core: Services,
  ctx: RequestContext,
  model: Model,
  body: Record<string, unknown>,
  bytes: Uint8Array | string,
  signal: AbortSignal,
  servedBy: (upstream: string) => void,
  pluginsRan: boolean,
): Promise<Outcome> {
  try {
    const answer = await callModelWithBody(core, ctx, model, '/images/generations', body, bytes, signal, pluginsRan);
    const res = answer.res;
    servedBy(answer.served.upstream);
    if (res.status < 200 || res.status >= 300) throw await upstreamError(res, answer.served.upstream, { log: core.log, requestId: ctx.requestId });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = null;
    }
    // An images answer lists its images in `data`: a body without that list (an error object
    // sent with a 200, an array, `data` not a list) delivers none, and is not billed.
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed) || !Array.isArray((parsed as { data?: unknown }).data)) {
      throw new GatewayError('upstream_error', `The upstream "${answer.served.upstream}" sent a malformed images answer.`);
    }
    return { ok: true, body: parsed as Record<string, unknown>, text };
  } catch (err) {
    const gErr =
      err instanceof GatewayError ? err : new GatewayError('upstream_error', 'The image generation failed.', { cause: err });
    return { ok: false, err: gErr };
  }
}

/** The image request past its deadline: a job (202) whose result lands when the call ends. */
async function asJob(
  core: Services,
  ctx: RequestContext,
  at: { jobId: string; model: string; tier: string; leaseId: string },
  work: Promise<Outcome>,
  finish: (outcome: Outcome) => Promise<void>,
  chargeOf: (body: Record<string, unknown>) => JobCharge,
  abort: () => void,
  /** Whether the call was released (by shutdown) before the job finished. */
  closed: () => boolean,
): Promise<Response> {
  const { jobId, tier } = at;
  const now = core.now();
  const job: JobRecord = {
    id: jobId,
    object: 'image',
    accountId: ctx.key.accountId,
    keyId: ctx.key.id,
    model: at.model,
    status: 'in_progress',
    progress: 0,
    createdAt: unixSeconds(now),
    completedAt: null,
    expiresAt: unixSeconds(now + core.cfg.limits.jobTtlMs),
    error: null,
    result: null,
    holdId: ctx.requestId,
    leaseId: at.leaseId,
    tier,
    owner: core.jobs.instanceId,
    ownerUntil: core.jobs.ownerUntil(),
  };
  try {
    await core.stores.jobs.create(job, core.cfg.limits.jobTtlMs);
  } catch (err) {
    abort();
    // The client gets no job to fetch the images from: nothing is charged, whatever the call did.
    void work.then(() => finish({ ok: false, err: new GatewayError('upstream_error', 'job not recorded') }));
    throw new GatewayError('service_unavailable', 'The job store is unreachable. Try again shortly.', {
      headers: { 'retry-after': '1' },
      cause: err,
    });
  }
  core.jobs.own(job, async (_job, signal) => {
    const done = await work;
    // Shutdown released the call meanwhile: the images are not published unpaid.
    const outcome: Outcome = done.ok && closed() ? { ok: false, err: errors.cutByShutdown('image generation') } : done;
    if (outcome.ok) {
      // The images and their charge go into the job first (not shown yet), and only while the
      // job is this instance's; then the charge lands, and only then are the images shown: a
      // client that holds them has paid, and an instance that adopts the job meanwhile (this one
      // stalled) charges and completes it rather than call it lost after it was paid for.
      const recorded = await finalUpdate(core, jobId, { result: outcome.body, charging: chargeOf(outcome.body) }, signal, { owner: core.jobs.instanceId });
      if (!recorded) {
        // Adopted as lost meanwhile (its hold released): not charged, not shown.
        core.log.warn({ msg: 'an image job was ended elsewhere before its images were recorded; not charged', job_id: jobId });
        await finish({ ok: false, err: new GatewayError('upstream_error', 'job ended elsewhere') });
        return;
      }
      // Shutdown may have released the call while the record was written: the images are then
      // not shown. Checked with no wait before the charge, which closes the call at once.
      if (closed()) {
        const err = errors.cutByShutdown('image generation');
        const cut = { status: 'failed' as const, result: null, charging: null, completedAt: unixSeconds(core.now()), error: { code: err.code, message: err.message } };
        await finalUpdate(core, jobId, cut, signal, { owner: core.jobs.instanceId }).finally(() => finish({ ok: false, err }));
        return;
      }
      await finish(outcome);
      await finalUpdate(core, jobId, { status: 'completed', progress: 100, completedAt: unixSeconds(core.now()), charging: null }, signal);
      return;
    }
    const failed = { status: 'failed' as const, completedAt: unixSeconds(core.now()), error: { code: outcome.err.code, message: outcome.err.message } };
    try {
      await finalUpdate(core, jobId, failed, signal);
    } finally {
      // Released whether or not the job's end could be written: nothing was produced.
      await finish(outcome);
    }
  });
  const view = jobView(job);
  return json(202, view, { location: `/v1/images/${jobId}` });
}

/**
 * Writes an image job's end, tried again while the store refuses it: a billed job whose images
 * were never written would be adopted as lost ("nothing was charged") and its images thrown
 * away. Meanwhile the job stays this instance's (its ownership is renewed while it is
 * tracked), so no instance adopts it. Given up when the instance stops, or on an error that
 * is not the store being unreachable.
 */
async function finalUpdate(core: Services, jobId: string, patch: Partial<JobRecord>, signal: AbortSignal, claim?: JobClaim): Promise<JobRecord | null> {
  let wait = 250;
  for (;;) {
    try {
      return await core.stores.jobs.update(jobId, patch, UNFINISHED, claim);
    } catch (err) {
      // Only an unreachable store is waited out; any other refusal would refuse every try.
      if (signal.aborted || !isStoreUnavailable(err)) throw err;
      core.log.warn({ msg: 'image job update failed; tried again', job_id: jobId, err: err instanceof Error ? err.message : String(err) });
      await sleep(wait, signal).catch(() => undefined);
      wait = Math.min(wait * 2, 5_000);
    }
  }
}

/**
 * Adopts an image job whose instance stopped renewing it. Its images and their charge were
 * recorded (that instance stalled after): the charge lands (once) and the job completes.
 * Otherwise the work is lost: `failed` (`job_lost`), nothing charged.
 */
export function adoptLostImage(core: Services): (job: JobRecord) => Promise<void> {
  return async (job) => {
    // Claimed first (one instance ends it), which also keeps its first instance, should it come
    // back, from recording a charge now.
    const claimed = await claimLapsed(core, job);
    if (!claimed) return;
    const call = core.meter.resume({ id: job.holdId, accountId: job.accountId, keyId: job.keyId, model: core.catalog.get(job.model), durable: true });
    if (!(await endCharged(core, claimed, call))) {
      const failed = await core.stores.jobs.update(
        job.id,
        {
          status: 'failed',
          completedAt: unixSeconds(core.now()),
          error: { code: 'job_lost', message: 'The instance generating this image stopped; nothing was charged.' },
        },
        UNFINISHED,
        { owner: core.jobs.instanceId },
      );
      if (!failed) {
        // Another instance took it over meanwhile (this one's claim lapsed): it ends the hold.
        call.leave?.();
        return;
      }
      await releaseCall(call);
    }
    const lease: LeaseRef = { pool: leasePool('image', job.accountId), leaseId: job.leaseId };
    await core.jobs.drop(lease);
  };
}
