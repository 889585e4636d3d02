/**
 * The calendar budgets count in: UTC days, weeks that start on Monday, and UTC months, each
 * from 00:00 UTC. Every driver counts a settle's cost into the three periods its ledger entry
 * falls in, under the names below, so a budget set later still sees the period's spend.
 */
import type { BudgetPeriod, SettleRequest } from './types.js';

const DAY_MS = 86_400_000;

/** 00:00 UTC of the day, the Monday or the first of the month that `ms` falls in. */
export function periodStart(period: BudgetPeriod, ms: number): number {
  const d = new Date(ms);
  const day = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  if (period === 'day') return day;
  // getUTCDay: 0 is Sunday; a week starts on the Monday before it.
  if (period === 'week') return day - ((d.getUTCDay() + 6) % 7) * DAY_MS;
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** When the period that `ms` falls in ends (and the next begins). */
export function periodEnd(period: BudgetPeriod, ms: number): number {
  const start = periodStart(period, ms);
  if (period === 'day') return start + DAY_MS;
  if (period === 'week') return start + 7 * DAY_MS;
  const d = new Date(start);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

/** The period's name: "d2026-11-26" (a day), "w2026-11-23" (the week from that Monday), "m2026-11". */
export function periodName(period: BudgetPeriod, ms: number): string {
  const iso = new Date(periodStart(period, ms)).toISOString();
  if (period === 'month') return `m${iso.slice(0, 7)}`;
  return `${period === 'day' ? 'd' : 'w'}${iso.slice(0, 10)}`;
}

/** The last day asked for and its names: every settle asks, nearly always for today. */
let lastDay = Number.NaN;
let lastNames: readonly [string, string, string] = ['', '', ''];

/** The names of the day, week and month `ms` falls in: where a settle at `ms` counts its cost. */
export function spendPeriods(ms: number): readonly [string, string, string] {
  // A UTC day lies in one week and one month: its names are those of its 00:00.
  const day = Math.floor(ms / DAY_MS);
  if (day !== lastDay) {
    // Frozen: every settle of the day shares it.
    lastNames = Object.freeze([periodName('day', ms), periodName('week', ms), periodName('month', ms)] as const);
    lastDay = day;
  }
  return lastNames;
}

/**
 * The month a settle's cost counts in: the one it names, which is its entry's; a settle
 * journaled by a version before SettleRequest.month takes its entry's month too, on every driver.
 */
export function settleMonth(req: SettleRequest): string {
  return (req as Partial<SettleRequest>).month ?? new Date(req.entry.at).toISOString().slice(0, 7);
}
