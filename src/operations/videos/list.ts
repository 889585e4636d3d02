/** GET /videos (the account's video jobs, paged) and DELETE /videos/{id} (a finished job). */
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { json } from '../../http/json.js';
import { jobView, UNFINISHED } from '../../jobs/runner.js';
import { readJob } from '../media.js';
import { refuseAgentKeys } from '../shared.js';
import { shownId } from '../../auth/keys.js';

const LIST_LIMIT_MAX = 100;

/**
 * GET /videos: the account's video jobs, newest first unless `order=asc`, `limit` (1-100,
 * default 20) per page, the next page `after` the last id of this one.
 */
export async function listVideos(core: Services, ctx: RequestContext): Promise<Response> {
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
    if (job?.object !== 'video' || job.accountId !== ctx.key.accountId) {
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
export async function deleteVideo(core: Services, ctx: RequestContext): Promise<Response> {
  refuseAgentKeys(ctx);
  const job = await readJob(core, ctx, 'video');
  if (UNFINISHED.includes(job.status) || !(await core.stores.jobs.delete(job.id, ['completed', 'failed']))) {
    const now = await core.stores.jobs.get(job.id);
    if (!now) throw new GatewayError('job_not_found', `No video job with id "${shownId(job.id)}".`, { param: 'id' });
    throw new GatewayError('invalid_request', `The video job is ${now.status}; it can be deleted once it is completed or failed.`, {
      param: 'id',
    });
  }
  return json(200, { id: job.id, object: 'video.deleted', deleted: true });
}
