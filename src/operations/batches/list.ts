/** `GET /v1/batches`, `GET /v1/batches/{id}` and `POST /v1/batches/{id}/cancel`, for the account's own batches. */
import { GatewayError } from '../../errors.js';
import { json } from '../../http/json.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import { changeBatch } from './change.js';
import { batchNotFound, batchView, listLimit, listView } from './views.js';

export async function listBatches(core: Services, ctx: RequestContext): Promise<Response> {
  const limit = listLimit(ctx.query, 100, 20);
  const afterId = ctx.query.get('after');
  let after: { createdAt: number; id: string } | undefined;
  if (afterId) {
    const b = await core.stores.batches.getBatch(ctx.key.accountId, afterId);
    if (!b) throw new GatewayError('invalid_request', `after names no batch: ${afterId.slice(0, 100)}`, { param: 'after' });
    after = { createdAt: b.createdAt, id: b.id };
  }
  const page = await core.stores.batches.listBatches(ctx.key.accountId, { order: 'desc', limit: limit + 1, ...(after ? { after } : {}) });
  return json(200, listView(page.slice(0, limit), page.length > limit, batchView));
}

export async function retrieveBatch(core: Services, ctx: RequestContext): Promise<Response> {
  const id = ctx.params.id ?? '';
  const b = await core.stores.batches.getBatch(ctx.key.accountId, id);
  if (!b) throw batchNotFound(id);
  return json(200, batchView(b));
}

/**
 * Cancelling: the batch is `cancelling` at once, and `cancelled` once the lines running end
 * (they finish and are billed; no new line starts). A batch already over stays as it is (409).
 */
export async function cancelBatch(core: Services, ctx: RequestContext): Promise<Response> {
  const id = ctx.params.id ?? '';
  const at = Math.floor(core.now() / 1000);
  const b = await changeBatch(core.stores.batches, { accountId: ctx.key.accountId, id }, (b) =>
    b.status === 'in_progress' || b.status === 'validating' || b.status === 'finalizing' ? { ...b, status: 'cancelling', cancellingAt: at } : null,
  );
  if (!b) throw batchNotFound(id);
  if (b.status !== 'cancelling' && b.status !== 'cancelled') {
    throw new GatewayError('invalid_request', `A batch that is ${b.status} cannot be cancelled.`, { param: 'batch_id', status: 409 });
  }
  core.batches.poke(id);
  return json(200, batchView(b));
}
