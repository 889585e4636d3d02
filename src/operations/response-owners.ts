/**
 * Who created each response id the gateway relayed. Every tenant's call reaches the upstream
 * under the operator's key, so the upstream would continue any thread for anyone holding its
 * id: the gateway keeps the owning account of each id and lets only that account continue it
 * (`previous_response_id`); any other caller, and an id the gateway never relayed, gets 404.
 *
 * The record lives in the idempotency store, which every driver has and which instances share
 * (a plain record per id, kept 30 days: `complete` is an upsert, and `begin` reads it). A
 * lookup of an id nobody recorded leaves only a marker that expires after a millisecond.
 */
import { GatewayError } from '../errors.js';
import type { Services } from '../services.js';

/** How long a response id stays usable through the gateway (the upstream keeps them about as long). */
export const RESPONSE_OWNER_TTL_MS = 30 * 24 * 60 * 60 * 1000;
const scope = (responseId: string) => `response-owner:${responseId}`;
const RECORD = { status: 200, headers: {}, body: '' };

/** The longest response id kept and looked up (OpenAI's are about 50 characters). */
const MAX_RESPONSE_ID = 256;

/** Records that `accountId` created `responseId`. */
export async function rememberResponseOwner(core: Services, responseId: string, accountId: string): Promise<void> {
  // An id longer than any is never looked up (below): not kept either.
  if (responseId.length > MAX_RESPONSE_ID) return;
  await core.stores.idempotency.complete(scope(responseId), accountId, RECORD, RESPONSE_OWNER_TTL_MS);
}

/**
 * The same, for a caller that must not fail on it (the answer has been billed already): a
 * failure is logged, and the id is then refused to everyone, which is the safe side.
 */
export function keepResponseOwner(core: Services, responseId: string, accountId: string, requestId: string): Promise<void> {
  return rememberResponseOwner(core, responseId, accountId).catch((err: unknown) => {
    core.log.warn({ msg: 'response owner not recorded', request_id: requestId, response_id: responseId, err });
  });
}

/** Throws 404 `not_found` unless `accountId` created `responseId` through the gateway. */
export async function checkResponseOwner(core: Services, responseId: string, accountId: string): Promise<void> {
  // No response id is this long (OpenAI's are about 50 characters): never looked up, so no
  // client can make the store refuse an oversized key (PostgreSQL's index rows stop near
  // 2.7 KB), which would read as a store outage (503) rather than the unknown id it is.
  const found = responseId.length <= MAX_RESPONSE_ID ? await core.stores.idempotency.begin(scope(responseId), '', 1) : null;
  if (found?.state === 'done' && found.fingerprint === accountId) return;
  throw new GatewayError('not_found', `Previous response with id '${responseId.slice(0, 200)}' not found.`, {
    param: 'previous_response_id',
  });
}
