/**
 * Times an operator types: a date or time that does not exist is refused naming the field,
 * never rolled over by Date.parse into another day (2026-02-30 read as 2026-03-02 would make
 * a ledger or usage query silently read another range).
 */
import { describe, expect, it } from 'vitest';
import { toUnixMs, whenToUnixMs } from '../../src/admin/times.js';

describe('admin times', () => {
  it('reads real dates and date-times, UTC unless an offset is named', () => {
    expect(toUnixMs('2024-02-29', 'from')).toBe(Date.UTC(2024, 1, 29));
    expect(toUnixMs('2026-12-31T23:59:59Z', 'to')).toBe(Date.UTC(2026, 11, 31, 23, 59, 59));
    expect(toUnixMs('2026-01-01T10:00+05:30', 'from')).toBe(Date.UTC(2026, 0, 1, 4, 30));
    expect(toUnixMs('2026-01-01 10:00:00.250', 'from')).toBe(Date.UTC(2026, 0, 1, 10, 0, 0, 250));
    expect(whenToUnixMs('2026-03-01', 'from', 0)).toBe(Date.UTC(2026, 2, 1));
  });

  it('refuses a day, hour, minute, second or offset that does not exist, naming the field', () => {
    for (const text of ['2026-02-29', '2026-02-30', '2026-04-31', '2026-13-01', '2026-00-10', '2026-01-00', '2026-01-01T24:00', '2026-01-01T10:60', '2026-01-01T10:00:61Z', '2026-01-01T10:00+24:00']) {
      expect(() => toUnixMs(text, 'from'), text).toThrow(/^from: not a time/);
      expect(() => whenToUnixMs(text, 'to', 0), text).toThrow(/^to: not a time/);
    }
  });
});
