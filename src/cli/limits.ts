/**
 * The CLI's flags for a key's or an account's limits beyond the monthly cap:
 *   --models acme/*,sim/fast-chat   (or "all": every model)
 *   --tpm 40000                     (or "default": the configured limit)
 *   --budget 5/day --budget 100/month   (or --budget none: no budgets)
 * Checked before anything connects to the storage; a bad value is one line naming the flag.
 */
import type { BudgetInput, KeyLimitsInput } from '../admin/limits.js';

export class LimitFlagError extends Error {}

/** Budgets from repeated --budget USD/PERIOD flags; undefined when none was given. */
export function budgetFlags(values: readonly string[] | undefined): BudgetInput[] | undefined {
  if (values === undefined || values.length === 0) return undefined;
  if (values.length === 1 && values[0] === 'none') return [];
  return values.map((v) => {
    const m = /^(\d{1,15}(?:\.\d{1,9})?)\/(day|week|month)$/.exec(v);
    if (!m) throw new LimitFlagError(`--budget must be USD/PERIOD, e.g. 5/day, 20/week or 100.5/month (or none), got ${v.slice(0, 40)}`);
    return { usd: m[1] as string, period: m[2] as BudgetInput['period'] };
  });
}

/** The key limits the flags set (fields whose flag was not given are left out). */
export function keyLimitFlags(values: { models?: string | undefined; tpm?: string | undefined; budget?: string[] | undefined }): KeyLimitsInput {
  const out: KeyLimitsInput = {};
  if (values.models !== undefined) {
    out.models = values.models === 'all' ? null : values.models.split(',').map((m) => m.trim()).filter((m) => m !== '');
    if (out.models?.length === 0) throw new LimitFlagError('--models must list model ids or prefixes ending in * (or all)');
  }
  if (values.tpm !== undefined) {
    if (values.tpm !== 'default' && !/^[1-9]\d{0,14}$/.test(values.tpm)) throw new LimitFlagError('--tpm must be a positive whole number of tokens (or default)');
    out.tokensPerMinute = values.tpm === 'default' ? null : Number(values.tpm);
  }
  const budgets = budgetFlags(values.budget);
  if (budgets !== undefined) out.budgets = budgets;
  return out;
}
