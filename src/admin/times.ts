/**
 * Times as an operator gives them to the admin API, the programmatic admin and the CLI: unix
 * ms, a Date, an ISO 8601 date or date-time, or an age before now. An AdminError names the field.
 */
import { AdminError } from './admin-error.js';

/** A time a query takes: unix ms, a Date, or an ISO 8601 date or date-time. */
export type TimeInput = number | Date | string;

/**
 * An ISO 8601 date or date-time as unix ms; UTC unless it names an offset (NaN when not one).
 * A day, hour or minute that does not exist ("2026-02-30", "24:00") is not a time: Date.parse
 * would roll it over into the next month or day, and a query would silently read another range.
 */
function isoToMs(text: string): number {
  const m = /^((\d{4})-(\d{2})-(\d{2}))(?:[T ]((\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,3})?)?)(Z|[+-](\d{2}):(\d{2}))?)?$/.exec(text);
  if (!m) return Number.NaN;
  const [, date, y, mo, d, time, hh, mm, ss, zone, zh, zm] = m;
  const day = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)));
  // Date.UTC maps years 0-99 to 1900-1999; setUTCFullYear keeps the year as written.
  day.setUTCFullYear(Number(y));
  if (day.toISOString().slice(0, 10) !== date) return Number.NaN;
  if (Number(hh ?? 0) > 23 || Number(mm ?? 0) > 59 || Number(ss ?? 0) > 59 || Number(zh ?? 0) > 23 || Number(zm ?? 0) > 59) return Number.NaN;
  return Date.parse(time === undefined ? `${date}T00:00:00Z` : `${date}T${time}${zone ?? 'Z'}`);
}

/** A query time as unix ms; an AdminError names the field when it is not a time. */
export function toUnixMs(value: TimeInput, field: string): number {
  const ms =
    typeof value === 'number'
      ? value
      : value instanceof Date
        ? value.getTime()
        : typeof value === 'string'
          ? isoToMs(value.trim())
          : Number.NaN;
  if (!Number.isSafeInteger(ms)) {
    throw new AdminError(`${field}: not a time: ${JSON.stringify(value)} (use unix ms, a Date, or an ISO 8601 date such as "2026-11-01")`);
  }
  return ms;
}

/** An age before now in a time parameter: minutes, hours or days ("30m", "24h", "7d"). */
const AGE = /^(\d{1,9})([mhd])$/;
const AGE_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * A time as an operator types it (the CLI's WHEN, the admin API's from / to): an age before
 * `now` ("30m", "24h", "7d"), unix ms (all digits), or an ISO 8601 date or date-time. One
 * parser, so the CLI and the HTTP API accept the same words. An AdminError names the field.
 */
export function whenToUnixMs(value: string, field: string, now: number): number {
  const age = AGE.exec(value);
  if (age) return now - Number(age[1]) * AGE_MS[age[2] as keyof typeof AGE_MS];
  if (/^\d+$/.test(value)) return toUnixMs(Number(value), field);
  try {
    return toUnixMs(value, field);
  } catch {
    throw new AdminError(`${field}: not a time: ${value.slice(0, 60)} (an ISO 8601 date or date-time, unix ms, or an age such as 24h or 7d)`);
  }
}

