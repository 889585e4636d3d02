/**
 * What admin calls changed, and who made them: every admin API call that changes something
 * (accounts, keys, wallets, caps, grants, brands, documents) is one log line, `msg: "admin
 * change"`, and one entry in a small ring the console shows as recent changes (per instance,
 * bounded; the log is the lasting record).
 *
 * "Who" is the admin token's label and a non-secret id of it (a digest of its digest): never
 * the token. "What" is the route pattern, the ids it named, and the fields of the body that say
 * what changed (amounts, reasons, kinds, caps, budgets, token limits, models); texts that may be long or private (a
 * brand's voice, a document's text) are left out.
 */
import { createHash } from 'node:crypto';
import type { Logger } from '../observability/log.js';

export interface AdminChange {
  time: string;
  request_id: string;
  /** The admin token's label. */
  admin: string;
  /** A non-secret id of the admin token. */
  token_id: string;
  method: string;
  route: string;
  /** The ids the path named, and the id of what the call created (result_id). */
  target: Record<string, string>;
  change: Record<string, unknown>;
}

/** Body fields a change line carries. */
const SAID = ['account', 'id', 'kind', 'model', 'label', 'walletUsd', 'amountUsd', 'reason', 'monthlyCapUsd', 'models', 'tokensPerMinute', 'budgets', 'grants', 'name', 'title', 'brand'];

/** Changes kept for the console. */
const KEPT = 200;

/** A non-secret, stable id of an admin token from its configured SHA-256. */
export function adminTokenId(tokenSha256: string): string {
  return `adm_${createHash('sha256').update(tokenSha256.toLowerCase()).digest('hex').slice(0, 12)}`;
}

export interface ChangeLog {
  record(c: { requestId: string; method: string; route: string; params: Record<string, string>; body: unknown; result: unknown }): void;
  /** The latest changes, newest first. */
  list(limit: number): AdminChange[];
}

export function createChangeLog(log: Logger, who: { admin: string; tokenId: string }, now: () => number): ChangeLog {
  const kept: AdminChange[] = [];
  return {
    record({ requestId, method, route, params, body, result }) {
      const target: Record<string, string> = { ...params };
      const made = result !== null && typeof result === 'object' ? (result as { id?: unknown }).id : undefined;
      if (typeof made === 'string' && made !== params.id) target.result_id = made;
      const change: Record<string, unknown> = {};
      if (body !== null && typeof body === 'object') {
        for (const f of SAID) if (f in body) change[f] = (body as Record<string, unknown>)[f];
      }
      const entry: AdminChange = { time: new Date(now()).toISOString(), request_id: requestId, admin: who.admin, token_id: who.tokenId, method, route, target, change };
      const { time: _time, ...line } = entry; // pino stamps its own time
      log.info({ msg: 'admin change', ...line });
      kept.push(entry);
      if (kept.length > KEPT) kept.shift();
    },
    list(limit) {
      return kept.slice(-limit).reverse();
    },
  };
}
