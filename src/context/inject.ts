/**
 * The two fields the gateway consumes itself, `brand` and `knowledge`. They are never
 * relayed. Returns the system messages to prepend (brand first, then knowledge), or null.
 */
import type { Core, RequestContext } from '../core.js';
import { GatewayError } from '../errors.js';

export interface ContextFields {
  brand?: string | undefined;
  knowledge?: string | string[] | undefined;
}

export async function applyContext(_core: Core, _ctx: RequestContext, req: ContextFields): Promise<unknown[] | null> {
  if (req.brand !== undefined) {
    throw new GatewayError('brand_not_found', `No brand profile with id "${req.brand}" in this account.`, { param: 'brand' });
  }
  if (req.knowledge !== undefined) {
    throw new GatewayError('knowledge_not_found', 'Unknown knowledge id for this account.', { param: 'knowledge' });
  }
  return null;
}
