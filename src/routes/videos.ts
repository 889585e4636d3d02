/**
 * POST /videos (JSON or multipart, relayed upstream in the encoding it came in) -> 202 with a
 * queued job; never synchronous. The gateway tracks the upstream job itself, so it completes,
 * settles (seconds x tier price) and frees its slot with nobody polling. GET /videos/{id}
 * returns the job; GET /videos/{id}/content streams the clip with the caller's key, so the
 * upstream's key never leaves the gateway.
 */
import { z } from 'zod';
import { chooseTier } from '../billing/tiers.js';
import type { Core, RequestContext } from '../core.js';
import { GatewayError, errors } from '../errors.js';
import { json, parseJsonObject } from '../http.js';
import { jobView, leasePool, newJobId, UNFINISHED } from '../jobs/runner.js';
import { listCost } from '../billing/pricing.js';
import type { BilledCall } from '../billing/meter.js';
import type { JobRecord } from '../stores/types.js';
import { callUpstream, pluginFields, upstreamError, upstreamHeaders } from '../upstream/relay.js';
import { holdMedia, readJob, refuseAgentKeys, takeSlot, unixSeconds } from './media.js';
import { zodError } from './validation.js';
import { Response } from '@whatwg-node/server';

const DEFAULT_SECONDS = 4;

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

interface Submission {
  fields: Record<string, unknown>;
  body: Uint8Array | string;
  contentType: string;
}

/** Reads JSON or multipart; keeps the bytes so they can be relayed in the encoding they came in. */
async function readSubmission(core: Core, ctx: RequestContext): Promise<Submission> {
  const bytes = await ctx.body();
  const contentType = ctx.request.headers.get('content-type') ?? 'application/json';
  if (!/^multipart\/form-data/i.test(contentType)) {
    return { fields: parseJsonObject(bytes), body: bytes, contentType: 'application/json' };
  }
  let form: FormData;
  try {
    form = await new globalThis.Response(bytes as BodyInit, { headers: { 'content-type': contentType } }).formData();
  } catch {
    throw new GatewayError('invalid_request', 'The multipart body could not be parsed.');
  }
  const fields: Record<string, unknown> = {};
  const seen = new Set<string>();
  for (const [k, v] of form.entries()) {
    // A field sent twice means whatever the upstream reads (the first? the last?) may differ
    // from what is billed: refused, as a duplicate JSON key is.
    if (seen.has(k)) {
      throw new GatewayError('invalid_request', `The multipart field '${k.slice(0, 100)}' is given more than once.`, {
        param: k.slice(0, 100),
      });
    }
    seen.add(k);
    if (typeof v === 'string') fields[k] = v;
  }
  return { fields, body: bytes, contentType };
}

/**
 * The submission to relay, in the encoding it came in: the upstream's model name, or the
 * fields a plugin replaced (`replaced`: the whole new set of fields; a multipart body keeps
 * its files).
 */
async function forUpstream(sub: Submission, upstreamModel: string, replaced: Record<string, unknown> | null): Promise<Submission> {
  if (!replaced && sub.fields.model === upstreamModel) return sub;
  if (sub.contentType === 'application/json') {
    const fields = replaced ?? { ...parseJsonObject(sub.body as Uint8Array), model: upstreamModel };
    return { ...sub, body: JSON.stringify(fields) };
  }
  const form = await new globalThis.Response(sub.body as BodyInit, { headers: { 'content-type': sub.contentType } }).formData();
  form.set('model', upstreamModel);
  if (replaced) {
    for (const k of Object.keys(sub.fields)) if (!(k in replaced)) form.delete(k);
    for (const [k, v] of Object.entries(replaced)) form.set(k, typeof v === 'string' ? v : JSON.stringify(v));
  }
  const encoded = new globalThis.Response(form);
  return {
    ...sub,
    body: new Uint8Array(await encoded.arrayBuffer()),
    contentType: encoded.headers.get('content-type') ?? sub.contentType,
  };
}

export async function createVideo(core: Core, ctx: RequestContext): Promise<Response> {
  refuseAgentKeys(ctx);
  const sub = await readSubmission(core, ctx);
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
  let call: BilledCall | undefined;
  try {
    // A job any instance can finish: the hold lives as long as the job and survives shutdown.
    call = await holdMedia(
      core,
      ctx,
      { id: jobId, model, amount: listCost(model, { kind: 'seconds', seconds, tier }), ttlMs: core.cfg.limits.jobTtlMs, durable: true },
      `${seconds} s of video at tier ${tier}`,
    );
    try {
      const replaced = await pluginFields(core, ctx, model, '/videos', { ...sub.fields, model: model.upstreamModel });
      const out = await forUpstream(sub, model.upstreamModel, replaced);
      const res = await callUpstream(core, model.upstream, {
        method: 'POST',
        path: '/videos',
        headers: upstreamHeaders(ctx.requestId, out.contentType),
        body: out.body,
      });
      if (res.status < 200 || res.status >= 300) throw await upstreamError(res, model.upstream);
      const parsed = JSON.parse(await res.text()) as unknown;
      if (!parsed || typeof parsed !== 'object' || typeof (parsed as { id?: unknown }).id !== 'string') {
        throw new GatewayError('upstream_error', `The upstream "${model.upstream}" sent a malformed video job.`);
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

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });

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

/** Polls the upstream job until it is terminal; settles or refunds once (through `call`); frees the slot. */
export async function trackVideo(core: Core, job: JobRecord, signal: AbortSignal, call: BilledCall): Promise<void> {
  const model = core.catalog.get(job.model);
  const lease = { pool: leasePool('video', job.accountId), leaseId: job.leaseId };
  const fail = async (code: string, message: string) => {
    const updated = await core.stores.jobs.update(
      job.id,
      { status: 'failed', completedAt: unixSeconds(core.now()), error: { code, message } },
      UNFINISHED,
    );
    if (updated) await call.cancel();
    await core.jobs.drop(lease);
  };
  if (!model || !job.upstreamJobId) return fail('job_lost', 'The video job can no longer be tracked; nothing was charged.');
  const expiresAtMs = (job.expiresAt ?? Infinity) * 1000;

  while (!signal.aborted) {
    await sleep(core.cfg.limits.jobPollIntervalMs, signal);
    if (signal.aborted) return;
    if (core.now() >= expiresAtMs) return fail('job_expired', 'The upstream did not finish the video before the job expired.');
    let upstream: Record<string, unknown>;
    try {
      const res = await callUpstream(core, model.upstream, {
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
      core.log.warn({ msg: 'video poll failed', jobId: job.id, err: err instanceof Error ? err.message : String(err) });
      continue;
    }
    const status = upstream.status;
    if (status === 'completed') {
      const reported = reportedSeconds(upstream.seconds);
      const seconds = reported ?? job.seconds ?? DEFAULT_SECONDS;
      const updated = await core.stores.jobs.update(
        job.id,
        {
          status: 'completed',
          progress: 100,
          completedAt: unixSeconds(core.now()),
          result: {
            url: `/v1/videos/${job.id}/content`,
            content_type: 'video/mp4',
            seconds,
            size: typeof upstream.size === 'string' ? upstream.size : (job.size ?? null),
          },
        },
        UNFINISHED,
      );
      if (updated) {
        await call.bill({ kind: 'seconds', seconds, tier: job.tier }, reported === null ? 'estimate' : 'usage', {
          upstream: model.upstream,
        });
      }
      await core.jobs.drop(lease);
      return;
    }
    if (status === 'failed') {
      const e = (upstream.error ?? {}) as { code?: unknown; message?: unknown };
      return fail(
        typeof e.code === 'string' ? e.code : 'generation_failed',
        typeof e.message === 'string' ? e.message : 'The upstream failed to generate the video.',
      );
    }
    const progress = typeof upstream.progress === 'number' ? Math.max(0, Math.min(99, Math.floor(upstream.progress))) : 0;
    await core.stores.jobs
      .update(job.id, { status: status === 'queued' ? 'queued' : 'in_progress', progress }, UNFINISHED)
      .catch(() => undefined);
  }
}

/** Adopts a video job whose instance stopped renewing it, and tracks it to its end. */
export function adoptVideo(core: Core): (job: JobRecord) => Promise<void> {
  return async (job) => {
    const updated = await core.stores.jobs.update(
      job.id,
      { owner: core.jobs.instanceId, ownerUntil: core.jobs.ownerUntil() },
      UNFINISHED,
    );
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
    core.jobs.own(updated, (j, signal) => trackVideo(core, j, signal, call));
  };
}

export async function videoContent(core: Core, ctx: RequestContext): Promise<Response> {
  refuseAgentKeys(ctx);
  const job = await readJob(core, ctx, 'video');
  if (job.status !== 'completed' || !job.upstreamJobId) {
    throw new GatewayError('invalid_request', `The video job is ${job.status}; its content is available once completed.`, {
      param: 'id',
    });
  }
  const model = core.catalog.get(job.model);
  if (!model) throw new GatewayError('job_not_found', 'The model of this job is no longer configured.');
  const variant = ctx.query.get('variant');
  const query = variant && /^[a-z_]{1,32}$/.test(variant) ? `?variant=${variant}` : '';
  const res = await callUpstream(core, model.upstream, {
    method: 'GET',
    path: `/videos/${encodeURIComponent(job.upstreamJobId)}/content${query}`,
    headers: upstreamHeaders(ctx.requestId),
    signal: ctx.request.signal,
  });
  if (res.status < 200 || res.status >= 300) throw await upstreamError(res, model.upstream);
  const iterator = res.body[Symbol.asyncIterator]();
  const stream = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const next = await iterator.next();
          if (next.done) controller.close();
          else controller.enqueue(next.value);
        } catch (err) {
          controller.error(err);
        }
      },
      cancel() {
        res.discard();
      },
    },
    { highWaterMark: 0 },
  );
  const length = res.header('content-length');
  return new Response(stream, {
    status: 200,
    headers: {
      'content-type': res.header('content-type') ?? 'video/mp4',
      ...(length ? { 'content-length': length } : {}),
    },
  });
}

const LIST_LIMIT_MAX = 100;

/**
 * GET /videos: the account's video jobs, newest first unless `order=asc`, `limit` (1-100,
 * default 20) per page, the next page `after` the last id of this one.
 */
export async function listVideos(core: Core, ctx: RequestContext): Promise<Response> {
  refuseAgentKeys(ctx);
  const q = ctx.query;
  const order = q.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') {
    throw new GatewayError('invalid_request', "Invalid value for 'order': expected 'asc' or 'desc'.", { param: 'order' });
  }
  const rawLimit = q.get('limit');
  const limit = rawLimit === null ? 20 : /^\d{1,3}$/.test(rawLimit) ? Number(rawLimit) : NaN;
  if (!(limit >= 1 && limit <= LIST_LIMIT_MAX)) {
    throw new GatewayError('invalid_request', `Invalid value for 'limit': expected a whole number from 1 to ${LIST_LIMIT_MAX}.`, {
      param: 'limit',
    });
  }
  const afterId = q.get('after');
  let after: { createdAt: number; id: string } | undefined;
  if (afterId !== null) {
    const job = await core.stores.jobs.get(afterId);
    if (!job || job.object !== 'video' || job.accountId !== ctx.key.accountId) {
      throw new GatewayError('invalid_request', `Invalid value for 'after': no video job with id "${afterId.slice(0, 100)}".`, {
        param: 'after',
      });
    }
    after = { createdAt: job.createdAt, id: job.id };
  }
  // One more than asked: whether it exists says if there is a next page.
  const jobs = await core.stores.jobs.listByAccount(ctx.key.accountId, 'video', { order, limit: limit + 1, ...(after ? { after } : {}) });
  const data = jobs.slice(0, limit).map(jobView);
  return json(200, {
    object: 'list',
    data,
    first_id: (data[0]?.id as string | undefined) ?? null,
    last_id: (data[data.length - 1]?.id as string | undefined) ?? null,
    has_more: jobs.length > limit,
  });
}

/**
 * DELETE /videos/{id}: forgets a finished (completed or failed) job of the account. A job
 * still running is refused: the gateway tracks it to bill (or refund) it, and that record is
 * what it tracks.
 */
export async function deleteVideo(core: Core, ctx: RequestContext): Promise<Response> {
  refuseAgentKeys(ctx);
  const job = await readJob(core, ctx, 'video');
  if (UNFINISHED.includes(job.status) || !(await core.stores.jobs.delete(job.id, ['completed', 'failed']))) {
    const now = await core.stores.jobs.get(job.id);
    if (!now) throw new GatewayError('job_not_found', `No video job with id "${job.id}".`, { param: 'id' });
    throw new GatewayError('invalid_request', `The video job is ${now.status}; it can be deleted once it is completed or failed.`, {
      param: 'id',
    });
  }
  return json(200, { id: job.id, object: 'video.deleted', deleted: true });
}
