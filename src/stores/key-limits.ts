/**
 * The limits a key or an account carries beyond the monthly cap (model allow-list, tokens per
 * minute, budgets), as the drivers that keep records in text columns or JSON store them:
 * amounts as decimal strings (JSON has no bigint).
 */
import type { ApiKeyRecord, Budget, BudgetPeriod, KeyPatch } from './types.js';
import { jsonText } from './json-text.js';

type StoredBudget = { amount: string; period: BudgetPeriod };
export type KeyLimits = Required<Pick<ApiKeyRecord, 'models' | 'tokensPerMinute' | 'budgets'>>;

export function encodeBudgets(budgets: readonly Budget[] | undefined): string {
  return JSON.stringify((budgets ?? []).map((b): StoredBudget => ({ amount: b.amount.toString(), period: b.period })));
}

export function decodeBudgets(text: string | null | undefined): Budget[] {
  if (!text) return [];
  return (JSON.parse(text) as StoredBudget[]).map((b) => ({ amount: BigInt(b.amount), period: b.period }));
}

/** The key's limits as one JSON text; null when it has none (a record written before them reads the same). */
export function encodeKeyLimits(k: Partial<KeyLimits>): string | null {
  const models = k.models ?? null;
  const tokensPerMinute = k.tokensPerMinute ?? null;
  const budgets = k.budgets ?? [];
  if (models === null && tokensPerMinute === null && budgets.length === 0) return null;
  return jsonText({ models, tokensPerMinute, budgets: JSON.parse(encodeBudgets(budgets)) as StoredBudget[] });
}

/**
 * The limits a stored text holds, only those set: a key without limits reads back exactly as
 * it was written, without fields it never had.
 */
export function decodeKeyLimits(text: string | null | undefined): Partial<KeyLimits> {
  if (!text) return {};
  const v = JSON.parse(text) as { models?: string[] | null; tokensPerMinute?: number | null; budgets?: StoredBudget[] };
  const out: Partial<KeyLimits> = {};
  if (v.models != null) out.models = v.models;
  if (v.tokensPerMinute != null) out.tokensPerMinute = v.tokensPerMinute;
  if (v.budgets?.length) out.budgets = decodeBudgets(JSON.stringify(v.budgets));
  return out;
}

/** An account's budgets as a record carries them: absent when there are none. */
export function budgetsField(text: string | null | undefined): { budgets?: Budget[] } {
  const budgets = decodeBudgets(text);
  return budgets.length ? { budgets } : {};
}

/** Only the limits `patch` sets, as JSON, for a driver that merges them into the stored ones in one statement. */
export function encodeLimitsPatch(patch: KeyPatch): string {
  const out: Record<string, unknown> = {};
  if (patch.models !== undefined) out.models = patch.models;
  if (patch.tokensPerMinute !== undefined) out.tokensPerMinute = patch.tokensPerMinute;
  if (patch.budgets !== undefined) out.budgets = JSON.parse(encodeBudgets(patch.budgets)) as StoredBudget[];
  return jsonText(out);
}

/** The key's limits after `patch` (fields the patch leaves out stay). */
export function patchedLimits(k: Partial<KeyLimits>, patch: KeyPatch): KeyLimits {
  return {
    models: patch.models !== undefined ? patch.models : (k.models ?? null),
    tokensPerMinute: patch.tokensPerMinute !== undefined ? patch.tokensPerMinute : (k.tokensPerMinute ?? null),
    budgets: patch.budgets ?? k.budgets ?? [],
  };
}

/** True when the patch changes any of the key's limits. */
export const touchesLimits = (patch: KeyPatch) =>
  patch.models !== undefined || patch.tokensPerMinute !== undefined || patch.budgets !== undefined;
