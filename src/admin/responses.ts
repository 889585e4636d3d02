/**
 * The answers of the console's admin routes, as zod schemas: the OpenAPI document describes
 * them from here (openapi.ts), and a test checks real answers against them. Amounts are USD
 * decimal strings; the recent-requests fields are snake_case, like the access line.
 */
import { z } from 'zod';

const usd = z.string().describe('USD, an exact decimal string');
const spendRow = z.object({ group: z.string(), calls: z.number().int(), costUsd: usd });
const list = <T extends z.ZodType>(item: T) => z.object({ object: z.literal('list'), data: z.array(item) });

export const accountsPage = list(
  z.object({ id: z.string(), grants: z.array(z.string()), createdAt: z.number().int(), balanceUsd: usd, heldUsd: usd }),
).extend({ total: z.number().int(), nextCursor: z.string().nullable(), more: z.boolean() });

export const overview = z.object({
  object: z.literal('overview'),
  accounts: z.number().int().describe('How many accounts there are'),
  totalUsd: usd,
  calls: z.number().int(),
  topAccounts: z.array(spendRow),
  topModels: z.array(spendRow),
  days: z.array(spendRow).describe('Spend per UTC day ("YYYY-MM-DD" in group), oldest first'),
  truncated: z.boolean(),
});

export const latestLedger = list(z.object({ id: z.string(), account: z.string(), key: z.string().nullable(), model: z.string().nullable(), costUsd: usd, at: z.number().int() }));

const recentRequest = z.object({
  request_id: z.string(),
  time: z.string(),
  method: z.string(),
  route: z.string(),
  status: z.number().int(),
  key_id: z.string().nullable(),
  account: z.string().nullable(),
  model: z.string().nullable(),
  upstream: z.string().nullable(),
  stream: z.boolean(),
  latency_ms: z.number(),
  cost_usd: usd.nullable(),
  error_code: z.string().nullable(),
});
export const requests = list(recentRequest).extend({
  kept: z.number().int().describe('The ring size of this instance'),
  more: z.boolean().describe('Older requests follow: ask again with before = the last request_id'),
});

export const modelStats = list(
  z.object({
    model: z.string(),
    calls: z.number().int(),
    errors: z.number().int(),
    refused: z.number().int(),
    error_rate: z.number(),
    p50_ms: z.number(),
    p95_ms: z.number(),
    max_ms: z.number(),
  }),
).extend({ kept: z.number().int() });

export const upstreams = list(
  z.object({
    name: z.string(),
    simulated: z.boolean(),
    state: z.enum(['closed', 'open', 'half-open']),
    recentFailures: z.number().int(),
    openedAt: z.number().int().nullable(),
    models: z.array(z.string()),
  }),
);

export const guardrailBlocks = list(
  z.object({
    at: z.string().describe('ISO 8601'),
    guardrail: z.string().describe('The id of the guardrail that blocked'),
    on: z.enum(['input', 'output']).describe('Whether the prompt or the answer was blocked'),
    requestId: z.string(),
    account: z.string(),
    key: z.string(),
    model: z.string(),
    path: z.string(),
  }),
);

export const changes = list(
  z.object({
    time: z.string(),
    request_id: z.string(),
    admin: z.string().describe('The admin token’s label'),
    token_id: z.string().describe('A non-secret id of the admin token'),
    method: z.string(),
    route: z.string(),
    target: z.record(z.string(), z.string()),
    change: z.record(z.string(), z.unknown()),
  }),
);
