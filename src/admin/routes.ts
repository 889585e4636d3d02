/**
 * The admin API's routes (under /admin/v1), declared once: the HTTP handler matches them with
 * the gateway's one path matcher (src/pipeline/router.ts), checks bodies and queries with
 * their schemas, and generates the OpenAPI document from them. Within a path, the order of the
 * methods is the order of the Allow header of a 405.
 */
import type { z } from 'zod';
import { type Routed, createRouter } from '../pipeline/router.js';
import * as accounts from './handlers/accounts.js';
import * as cache from './handlers/cache.js';
import * as activity from './handlers/activity.js';
import * as content from './handlers/content.js';
import type { AdminContext, Call } from './handlers/context.js';
import * as keys from './handlers/keys.js';
import * as monitor from './handlers/monitor.js';
import * as overview from './handlers/overview.js';
import { accountBatches } from './batches.js';
import * as R from './responses.js';
import * as S from './schemas.js';

type Schema = z.ZodType | undefined;

export interface AdminRoute extends Routed {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** Path after /admin/v1, with {name} parameters. */
  path: string;
  summary: string;
  /** The JSON body, parsed with this before the handler runs (a violation is 400). */
  body?: z.ZodType;
  /** The query parameters, parsed with this before the handler runs (a violation is 400). */
  query?: z.ZodType;
  /** The success answer's shape, for the OpenAPI document. @default any JSON object */
  returns?: z.ZodType;
  /** The success status. @default 200 */
  status?: number;
  /** The answer: JSON, or a Response sent as it is (an export). */
  run(x: AdminContext, c: Call<z.ZodType, z.ZodType>): Promise<unknown>;
}

/** A declaration whose handler takes the body and query its schemas parse to (checked here). */
function route<B extends Schema = undefined, Q extends Schema = undefined>(
  r: Omit<AdminRoute, 'body' | 'query' | 'run'> & {
    body?: B;
    query?: Q;
    run(x: AdminContext, c: Call<NoInfer<B>, NoInfer<Q>>): Promise<unknown>;
  },
): AdminRoute {
  // Sound: the handler is only ever called with what `body` and `query` parsed.
  return r as AdminRoute;
}

export const adminRoutes: readonly AdminRoute[] = [
  // Accounts and wallets.
  route({
    method: 'GET',
    path: '/accounts',
    summary: 'A page of accounts with their wallets, in id order; `search` keeps ids containing it (any case) ({data, total, nextCursor, more})',
    query: S.accountsQuery,
    returns: R.accountsPage,
    run: accounts.list,
  }),
  route({
    method: 'POST',
    path: '/accounts',
    summary: 'Create an account (its wallet credited with walletUsd)',
    body: S.createAccountBody,
    status: 201,
    run: accounts.create,
  }),
  route({ method: 'GET', path: '/accounts/{id}', summary: 'An account, its wallet balance and holds', run: accounts.get }),
  route({
    method: 'POST',
    path: '/accounts/{id}/credits',
    summary: 'Top up a wallet (a ledger entry with the reason)',
    body: S.creditBody,
    status: 201,
    run: accounts.credit,
  }),
  route({
    method: 'POST',
    path: '/accounts/{id}/adjustments',
    summary: 'Adjust a wallet by a signed amount (a ledger entry with the reason)',
    body: S.adjustmentBody,
    status: 201,
    run: accounts.adjust,
  }),
  route({
    method: 'PUT',
    path: '/accounts/{id}/grants',
    summary: 'Replace the "Contact sales" models an account is granted',
    body: S.grantsBody,
    run: accounts.setGrants,
  }),
  route({
    method: 'PUT',
    path: '/accounts/{id}/budgets',
    summary: 'Replace an account’s budgets per day, week or month (across all its keys)',
    body: S.accountBudgetsBody,
    run: accounts.setBudgets,
  }),

  // Keys.
  route({ method: 'GET', path: '/keys', summary: "List an account's keys (never their secrets)", query: S.keysQuery, run: keys.list }),
  route({
    method: 'POST',
    path: '/keys',
    summary: 'Create a key: the answer holds the key, shown this once',
    body: S.createKeyBody,
    status: 201,
    run: keys.create,
  }),
  route({ method: 'GET', path: '/keys/{id}', summary: 'A key', run: keys.get }),
  route({ method: 'DELETE', path: '/keys/{id}', summary: 'Delete a key (its ledger entries stay)', run: keys.remove }),
  route({ method: 'POST', path: '/keys/{id}/disable', summary: 'Disable a key (calls with it get 401)', run: keys.disable }),
  route({ method: 'POST', path: '/keys/{id}/enable', summary: 'Enable a disabled key', run: keys.enable }),
  route({
    method: 'POST',
    path: '/keys/{id}/rotate',
    summary: 'Replace a key’s secret (same id, spend and settings): the new key is shown this once (409 when another rotation of it wins)',
    run: keys.rotate,
  }),
  route({
    method: 'PUT',
    path: '/keys/{id}/monthly-cap',
    summary: 'Set (USD) or clear (null) a key’s monthly cap',
    body: S.monthlyCapBody,
    run: keys.setMonthlyCap,
  }),
  route({
    method: 'PUT',
    path: '/keys/{id}/limits',
    summary: 'Set a key’s model allow-list, tokens per minute and budgets (fields left out stay)',
    body: S.keyLimitsBody,
    run: keys.setLimits,
  }),

  // Brands and knowledge.
  route({ method: 'GET', path: '/accounts/{id}/brands', summary: 'An account’s brands', run: content.listBrands }),
  route({ method: 'GET', path: '/accounts/{id}/brands/{brand}', summary: 'A brand', run: content.getBrand }),
  route({ method: 'PUT', path: '/accounts/{id}/brands/{brand}', summary: 'Create or replace a brand', body: S.brandBody, run: content.putBrand }),
  route({ method: 'DELETE', path: '/accounts/{id}/brands/{brand}', summary: 'Delete a brand (409 while documents name it)', run: content.deleteBrand }),
  route({
    method: 'GET',
    path: '/accounts/{id}/documents',
    summary: 'An account’s knowledge documents (without their text)',
    run: content.listDocuments,
  }),
  route({ method: 'GET', path: '/accounts/{id}/documents/{doc}', summary: 'A knowledge document', run: content.getDocument }),
  route({
    method: 'PUT',
    path: '/accounts/{id}/documents/{doc}',
    summary: 'Create or replace a knowledge document',
    body: S.documentBody,
    run: content.putDocument,
  }),
  route({ method: 'DELETE', path: '/accounts/{id}/documents/{doc}', summary: 'Delete a knowledge document', run: content.deleteDocument }),

  // Usage, ledger and jobs.
  route({
    method: 'GET',
    path: '/ledger',
    summary: 'An account’s ledger, oldest first, or every account’s (account by account): a page (json) or every matching entry (csv, jsonl)',
    query: S.ledgerQuery,
    run: activity.ledger,
  }),
  route({
    method: 'GET',
    path: '/ledger/latest',
    summary: 'An account’s latest ledger entries, newest first (only those are read)',
    query: S.latestLedgerQuery,
    returns: R.latestLedger,
    run: overview.latestLedger,
  }),
  route({
    method: 'GET',
    path: '/overview',
    summary: 'Every account’s spend over [from, to): total, calls, top accounts and models, spend per UTC day',
    query: S.overviewQuery,
    returns: R.overview,
    run: overview.overview,
  }),
  route({
    method: 'GET',
    path: '/usage',
    summary: 'Spend and calls of an account or of all, by account, day (UTC, the default), model or key over [from, to)',
    query: S.usageQuery,
    run: activity.usage,
  }),
  route({ method: 'GET', path: '/jobs', summary: 'An account’s unfinished image and video jobs', query: S.jobsQuery, run: activity.listJobs }),
  route({ method: 'GET', path: '/jobs/{id}', summary: 'A job (any status)', run: activity.getJob }),
  route({
    method: 'GET',
    path: '/batches',
    summary: 'An account’s batches, newest first (the latest 100): status, request counts, files, the key that created each',
    query: S.jobsQuery,
    run: (x, c) => accountBatches(x.stores, c.query.account),
  }),

  // The response cache.
  route({
    method: 'DELETE',
    path: '/cache',
    summary: 'Purge the response cache: every entry, or one account’s ({object, account, purged})',
    query: S.cacheQuery,
    run: cache.purge,
  }),
  route({
    method: 'GET',
    path: '/cache',
    summary: 'This instance’s response cache hits, misses, hit rate and USD saved, in all and per account and model',
    run: cache.stats,
  }),

  // This instance: its recent requests, upstreams, and admin changes.
  route({
    method: 'GET',
    path: '/requests',
    summary:
      'This instance’s latest /v1 requests, newest first, from its bounded ring (admin.recentRequests), paged with before = the last request_id: request_id, time, route, status, key_id, account, model, latency_ms, cost_usd, error_code',
    query: S.requestsQuery,
    returns: R.requests,
    run: monitor.requests,
  }),
  route({
    method: 'GET',
    path: '/model-stats',
    summary: 'Per model, over this instance’s recent requests: calls, errors (5xx), refused (4xx), error_rate, p50_ms, p95_ms, max_ms',
    returns: R.modelStats,
    run: monitor.modelStats,
  }),
  route({
    method: 'GET',
    path: '/upstreams',
    summary: 'The upstreams, their models and circuit breaker as this instance sees it: state (closed, open, half-open), recentFailures, openedAt',
    returns: R.upstreams,
    run: monitor.upstreams,
  }),
  route({
    method: 'GET',
    path: '/changes',
    summary: 'The latest admin changes made through this instance, newest first: who (token label and id), route, target ids, what changed',
    query: S.changesQuery,
    returns: R.changes,
    run: monitor.changes,
  }),
  route({
    method: 'GET',
    path: '/guardrails',
    summary: 'The guardrails configured (id, kind, on input or output, action, the models and accounts they cover, and their settings)',
    run: monitor.guardrails,
  }),
  route({
    method: 'GET',
    path: '/guardrails/blocks',
    summary: 'The latest guardrail blocks on this instance (its last 200), newest first: which guardrail, on the prompt or the answer, the request, account, key, model and path',
    query: S.guardrailBlocksQuery,
    returns: R.guardrailBlocks,
    run: monitor.guardrailBlocks,
  }),
  route({
    method: 'GET',
    path: '/audit',
    summary: 'Check the books: balances, holds, keys’ spend and charges per hold id ({ok, accounts, entries, differences, unsettled})',
    query: S.auditQuery,
    run: activity.audit,
  }),
];

export const adminRouter = createRouter(adminRoutes);
