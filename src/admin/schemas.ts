/**
 * The admin API's request schemas (zod): one source for validation and for the OpenAPI
 * document. Bodies use the same camelCase names as the programmatic admin and the config file.
 */
import { z } from 'zod';
import { entityId } from '../options/values.js';

/**
 * Valid Unicode: a lone UTF-16 surrogate ("\ud800", valid JSON) is text no store keeps as sent
 * (each would store U+FFFD): refused here, naming the field, so what is stored is what was sent.
 */
const wellFormed = (s: string) => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

/**
 * An id the call names (an account, key, credit, model): no control character, which no
 * stored id holds and PostgreSQL cannot bind (NUL).
 */
const id = z
  .string()
  .min(1)
  .max(200)
  .regex(/^\P{Cc}*$/u, 'must not contain control characters')
  .refine(wellFormed, 'must be valid Unicode (no lone surrogate)');
/**
 * Free text the call stores (a label, a reason, a brand's voice, a document): anything but NUL,
 * which PostgreSQL cannot store in text (it would answer as a store failure, not a bad field).
 */
const text = z
  .string()
  .refine((s) => !s.includes('\u0000'), 'must not contain NUL')
  .refine(wellFormed, 'must be valid Unicode (no lone surrogate)');
/** A non-negative USD decimal (string or number); exactness is checked where it is parsed. */
const usd = z.union([z.string().regex(/^\d{1,15}(\.\d{1,9})?$/), z.number().nonnegative()]);
/** A signed USD decimal: adjustments may take money out. */
const signedUsd = z.union([z.string().regex(/^-?\d{1,15}(\.\d{1,9})?$/), z.number()]);
/** Unix ms, an ISO 8601 date or date-time, or an age before now ("30m", "24h", "7d"). */
const time = z.string().min(1).max(40);

/** A budget per UTC day, week (from Monday) or month. */
const budget = z.strictObject({ usd, period: z.enum(['day', 'week', 'month']) });
/** An exact model id, or a prefix ending in `*`. */
const modelPattern = id.regex(/^[^*]*\*?$/, 'a model id, or a prefix ending in "*"');

export const createAccountBody = z.strictObject({
  id: entityId,
  walletUsd: usd.optional(),
  grants: z.array(id).optional(),
  budgets: z.array(budget).optional(),
});

export const accountBudgetsBody = z.strictObject({ budgets: z.array(budget) });

/** A key's limits beyond the monthly cap; a field left out stays as it is. */
export const keyLimitsBody = z.strictObject({
  models: z.array(modelPattern).nullable().optional(),
  tokensPerMinute: z.number().int().positive().nullable().optional(),
  budgets: z.array(budget).optional(),
});

export const creditBody = z.strictObject({
  amountUsd: usd,
  reason: text.min(1).max(500),
  /** Makes the credit idempotent: the same id is applied once. */
  id: id.optional(),
});

export const adjustmentBody = z.strictObject({
  amountUsd: signedUsd,
  reason: text.min(1).max(500),
  id: id.optional(),
});

export const grantsBody = z.strictObject({ models: z.array(id) });

export const createKeyBody = z.strictObject({
  account: id,
  kind: z.enum(['developer', 'agent']).optional(),
  model: id.nullable().optional(),
  label: text.max(200).nullable().optional(),
  monthlyCapUsd: usd.nullable().optional(),
  ...keyLimitsBody.shape,
});

export const monthlyCapBody = z.strictObject({ monthlyCapUsd: usd.nullable() });

export const brandBody = z.strictObject({
  name: text.max(200).optional(),
  description: text.max(2_000).optional(),
  voice: text.min(1).max(10_000),
});

export const documentBody = z.strictObject({
  title: text.max(500).optional(),
  brand: id.nullable().optional(),
  text: text.min(1),
});

export const keysQuery = z.strictObject({ account: id });

/** Without `account`, every account's ledger (account by account; see src/admin/usage.ts). */
export const ledgerQuery = z.strictObject({
  account: id.optional(),
  key: id.optional(),
  from: time.optional(),
  to: time.optional(),
  /** One account's cursor (digits), or across accounts "<position>:<account id>". */
  cursor: z.string().max(250).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
  /** json (a page), csv or jsonl (every matching entry, streamed). */
  format: z.enum(['json', 'csv', 'jsonl']).optional(),
});

export const usageQuery = z.strictObject({
  /** Without it, every account's usage. */
  account: id.optional(),
  group_by: z.enum(['account', 'day', 'model', 'key']).default('day'),
  from: time.optional(),
  to: time.optional(),
});

export const jobsQuery = z.strictObject({ account: id });
/** Without `account`, every account's cache entries. */
export const cacheQuery = z.strictObject({ account: id.optional() });
export const auditQuery = z.strictObject({ account: id.optional() });

/** A page of accounts in id order, optionally those whose id contains `search` (any case). */
export const accountsQuery = z.strictObject({
  search: z.string().max(200).optional(),
  /** The `nextCursor` of the previous page (the last id it held). */
  cursor: z.string().max(200).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

export const overviewQuery = z.strictObject({
  from: time.optional(),
  to: time.optional(),
  /** How many top accounts and models. */
  top: z.coerce.number().int().min(1).max(100).default(10),
});

export const latestLedgerQuery = z.strictObject({ account: id, limit: z.coerce.number().int().min(1).max(1000).default(20) });

export const requestsQuery = z.strictObject({
  account: id.optional(),
  key: id.optional(),
  /** Only answers with a status of 400 or more. */
  errors: z.enum(['true', 'false']).optional(),
  /** The next page: requests older than this request id (the last one of the page before). */
  before: z.string().min(1).max(200).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(50),
});

export const changesQuery = z.strictObject({ limit: z.coerce.number().int().min(1).max(1000).default(50) });

export const guardrailBlocksQuery = z.strictObject({ limit: z.coerce.number().int().min(1).max(200).default(50), account: id.optional() });
