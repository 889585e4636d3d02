import type { BudgetSource, LimitSource } from './types.js';

const BUDGET_SOURCES: ReadonlySet<string> = new Set(
  ['key', 'account'].flatMap((scope) => ['daily', 'weekly', 'monthly'].map((p) => `${scope}_${p}_budget`)),
);

/** A refusal's limit source as a store script answered it (anything unknown reads as the wallet). */
export function limitSourceOf(source: unknown): LimitSource {
  if (source === 'key_monthly_cap') return 'key_monthly_cap';
  if (typeof source === 'string' && BUDGET_SOURCES.has(source)) return source as BudgetSource;
  return 'wallet';
}
