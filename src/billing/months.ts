/** The calendar the books count in: UTC months (monthly caps reset at 00:00 UTC on the 1st). */

/** The month monthOf worked out last, and the unix-ms range it covers (every call of a month hits it). */
let lastMonth = { from: 0, to: -1, month: '' };

/** "YYYY-MM" of a unix-ms time, in UTC: the month a monthly cap counts. */
export function monthOf(ms: number): string {
  if (ms >= lastMonth.from && ms < lastMonth.to) return lastMonth.month;
  const d = new Date(ms);
  const year = d.getUTCFullYear();
  const month = d.getUTCMonth();
  const name = `${year}-${String(month + 1).padStart(2, '0')}`;
  if (!Number.isNaN(year)) lastMonth = { from: Date.UTC(year, month, 1), to: Date.UTC(year, month + 1, 1), month: name };
  return name;
}

/** 00:00 UTC on the first day of the next month: when monthly caps reset. */
export function nextMonthStart(ms: number): Date {
  const d = new Date(ms);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
}
