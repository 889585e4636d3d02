/**
 * GET /videos/{id}/content: streams the finished clip from the upstream with the caller's
 * key, so the upstream's key never leaves the gateway.
 */
import { Response } from '@whatwg-node/server';
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { upstreamError } from '../../upstream/answer-errors.js';
import { callUpstream, upstreamHeaders } from '../../upstream/call.js';
import { relayBytes } from '../../upstream/stream/bytes.js';
import { readJob } from '../media.js';
import { refuseAgentKeys } from '../shared.js';

export async function videoContent(core: Services, ctx: RequestContext): Promise<Response> {
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
  // The clip is fetched from the upstream that accepted the job: no other one knows its id.
  const upstreamName = job.upstream ?? model.upstream;
  const res = await callUpstream(core, upstreamName, {
    method: 'GET',
    path: `/videos/${encodeURIComponent(job.upstreamJobId)}/content${query}`,
    headers: upstreamHeaders(ctx.requestId),
    signal: ctx.request.signal,
  }, ctx.observed.record, ctx.key.accountId);
  if (res.status < 200 || res.status >= 300) throw await upstreamError(res, upstreamName, { log: core.log, requestId: ctx.requestId });
  const stream = relayBytes(res);
  const length = res.header('content-length');
  return new Response(stream, {
    status: 200,
    headers: {
      'content-type': res.header('content-type') ?? 'video/mp4',
      ...(length ? { 'content-length': length } : {}),
    },
  });
}
