/**
 * The admin's side of a key's and an account's limits beyond the monthly cap: model
 * allow-lists, tokens per minute and budgets, read from an operator's input (USD amounts as
 * strings or numbers) and shown back in USD.
 */
import { formatUsd, parseUsd } from '../billing/money.js';
import type { Budget, BudgetPeriod, KeyPatch } from '../stores/types.js';
import { AdminError } from './admin-error.js';

export interface BudgetInput {
  usd: string | number;
  period: BudgetPeriod;
}

/** A key's limits as an operator sets them; a field left out stays as it is. */
export interface KeyLimitsInput {
  /** Models the key may call: exact ids or a prefix ending in `*`; null: every model. */
  models?: string[] | null;
  /** Tokens per minute for this key; null: the configured default. */
  tokensPerMinute?: number | null;
  /** Budgets per period (replace the key's); [] clears them. */
  budgets?: BudgetInput[];
}

const PERIODS: ReadonlySet<string> = new Set(['day', 'week', 'month']);

export function parseBudgets(input: readonly BudgetInput[] | undefined, field = 'budgets'): Budget[] {
  if (input === undefined) return [];
  if (!Array.isArray(input)) throw new AdminError(`${field}: must be a list of {usd, period}`);
  return input.map((b, i) => {
    if (!b || !PERIODS.has(b.period)) throw new AdminError(`${field}[${i}].period: must be "day", "week" or "month"`);
    try {
      return { amount: parseUsd(b.usd), period: b.period };
    } catch {
      throw new AdminError(`${field}[${i}].usd: must be a non-negative USD amount`);
    }
  });
}

export const budgetsView = (budgets: readonly Budget[] | undefined): { usd: string; period: BudgetPeriod }[] =>
  (budgets ?? []).map((b) => ({ usd: formatUsd(b.amount), period: b.period }));

/** The store patch for `input`, checked; an AdminError names the bad field. */
export function keyLimitsPatch(input: KeyLimitsInput): KeyPatch {
  const patch: KeyPatch = {};
  if (input.models !== undefined) {
    const models = input.models;
    if (models !== null && (!Array.isArray(models) || models.some((m) => typeof m !== 'string' || m === '' || m.slice(0, -1).includes('*')))) {
      throw new AdminError('models: must be a list of model ids, or prefixes ending in "*" (or null for every model)');
    }
    patch.models = models === null ? null : [...models];
  }
  if (input.tokensPerMinute !== undefined) {
    const n = input.tokensPerMinute;
    if (n !== null && (!Number.isSafeInteger(n) || n <= 0)) throw new AdminError('tokensPerMinute: must be a positive integer (or null)');
    patch.tokensPerMinute = n;
  }
  if (input.budgets !== undefined) patch.budgets = parseBudgets(input.budgets);
  return patch;
}
