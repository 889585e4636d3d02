/**
 * Who created each response, and each output item, the gateway relayed. Every tenant's call
 * reaches the upstream under the operator's key, so the upstream would continue any thread, and
 * resolve any stored item, for anyone holding its id: the gateway keeps the owning account of
 * each response id (`previous_response_id`) and of each output item id (an `item_reference`, a
 * reasoning item given by id, a chat answer's audio given back by id in an assistant message)
 * and lets only that account use it; any other caller, and an id the gateway never relayed,
 * gets 404.
 *
 * The record lives in the idempotency store, which every driver has and which instances share
 * (a plain record per id, kept 30 days: `complete` is an upsert, and `begin` reads it). A
 * lookup of an id nobody recorded leaves only a marker that expires after a millisecond.
 */
import { GatewayError } from '../errors.js';
import type { Services } from '../services.js';

/** How long a response id stays usable through the gateway (the upstream keeps them about as long). */
export const RESPONSE_OWNER_TTL_MS = 30 * 24 * 60 * 60 * 1000;
const responseScope = (responseId: string) => `response-owner:${responseId}`;
const itemScope = (itemId: string) => `response-item-owner:${itemId}`;
const RECORD = { status: 200, headers: {}, body: '' };

/** The longest id kept and looked up (OpenAI's are about 50 characters). */
const MAX_ID = 256;

/**
 * Whether an id is kept and looked up at all. No id the upstream makes is this long or holds a
 * NUL: one that does is never stored, so no client can make the store refuse a key (PostgreSQL's
 * index rows stop near 2.7 KB, and its text holds no NUL), which would read as a store outage
 * (503, retried by every SDK) rather than the unknown id it is.
 */
const storable = (id: string) => id.length <= MAX_ID && !id.includes('\u0000');

/** Records that `accountId` created `responseId` ('' for none) and the output items `itemIds`. */
export async function rememberResponseOwner(core: Services, responseId: string, accountId: string, itemIds: readonly string[] = []): Promise<void> {
  const scopes = [...(responseId && storable(responseId) ? [responseScope(responseId)] : []), ...itemIds.filter(storable).map(itemScope)];
  await Promise.all(scopes.map((scope) => core.stores.idempotency.complete(scope, accountId, RECORD, RESPONSE_OWNER_TTL_MS)));
}

/**
 * The same, for a caller that must not fail on it (the answer has been billed already): a
 * failure is logged, and the ids are then refused to everyone, which is the safe side.
 */
export function keepResponseOwner(core: Services, responseId: string, accountId: string, requestId: string, itemIds: readonly string[] = []): Promise<void> {
  return rememberResponseOwner(core, responseId, accountId, itemIds).catch((err: unknown) => {
    core.log.warn({ msg: 'response owner not recorded', request_id: requestId, response_id: responseId, err });
  });
}

async function owns(core: Services, scope: string, id: string, accountId: string): Promise<boolean> {
  if (!storable(id)) return false;
  const found = await core.stores.idempotency.begin(scope, '', 1);
  return found.state === 'done' && found.fingerprint === accountId;
}

/** Throws 404 `not_found` unless `accountId` created `responseId` through the gateway. */
export async function checkResponseOwner(core: Services, responseId: string, accountId: string): Promise<void> {
  if (await owns(core, responseScope(responseId), responseId, accountId)) return;
  throw new GatewayError('not_found', `Previous response with id '${responseId.slice(0, 200)}' not found.`, {
    param: 'previous_response_id',
  });
}

/**
 * Throws 404 `not_found` (naming `param`) unless `accountId` was given every one of `itemIds` in
 * an answer (a Responses output item, a chat answer's audio).
 */
export async function checkItemOwner(core: Services, itemIds: readonly string[], accountId: string, param = 'input'): Promise<void> {
  for (const id of new Set(itemIds)) {
    if (await owns(core, itemScope(id), id, accountId)) continue;
    throw new GatewayError('not_found', `Item with id '${id.slice(0, 200)}' not found.`, { param });
  }
}
