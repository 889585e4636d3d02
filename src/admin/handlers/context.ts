/**
 * What an admin API handler works with: the gateway's services and the programmatic admin,
 * the lookups every group of routes shares (an account or a key, 404 when there is none), and
 * the call itself with its body and query already checked against the route's schemas.
 */
import { budgetsView } from '../limits.js';
import type { z } from 'zod';
import type { Admin } from '../accounts.js';
import type { ChangeLog } from '../change-log.js';
import type { Services } from '../../services.js';
import type { Stores } from '../../stores/types.js';
import { GatewayError } from '../../errors.js';
import { shownId } from '../../auth/keys.js';
import { formatUsd } from '../../billing/money.js';

/** What a route's schema parses to; undefined when the route declares none. */
export type Input<S> = S extends z.ZodType ? z.output<S> : undefined;

/** A call to a route: B and Q are the route's body and query schemas. */
export interface Call<B extends z.ZodType | undefined = undefined, Q extends z.ZodType | undefined = undefined> {
  /** The path parameters, decoded. */
  params: Record<string, string>;
  body: Input<B>;
  query: Input<Q>;
}

/** No such object; `param`: the field that named it (the path's id unless a body or query field did). */
export const notFound = (what: string, id: string, param = 'id') =>
  new GatewayError('not_found', `No ${what} "${shownId(id)}".`, { param });

export class AdminContext {
  constructor(
    readonly core: Services,
    readonly admin: Admin,
    readonly changes: ChangeLog,
  ) {}

  get stores(): Stores {
    return this.core.stores;
  }

  /** An account as the API shows it: its wallet in USD strings and its open holds. `param`: the field naming it. */
  async account(id: string, param = 'id') {
    const acct = await this.stores.accounts.get(id);
    if (!acct) throw notFound('account', id, param);
    const w = await this.stores.billing.wallet(id);
    return {
      id: acct.id,
      grants: acct.grants,
      budgets: budgetsView(acct.budgets),
      createdAt: acct.createdAt,
      balanceUsd: formatUsd(w.balance),
      heldUsd: formatUsd(w.held),
      openHolds: await this.stores.billing.openHolds(id),
    };
  }

  async key(id: string) {
    const k = await this.admin.getKey(id);
    if (!k) throw notFound('key', id);
    return k;
  }
}
