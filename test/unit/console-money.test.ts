/**
 * The console's money display: an exact USD decimal string rounded half up to cents with
 * BigInt (never a float), thousands grouped, and a non-zero amount under half a cent never
 * shown as a false 0.00. The function is the one the console ships (taken from its script
 * text and run here), so the test checks what the browser runs.
 */
import { runInNewContext } from 'node:vm';
import { expect, it } from 'vitest';
import { SCRIPT_PAGES } from '../../src/admin/console/script-pages.js';

const source = /function cents\(v\) \{[\s\S]*?\n {2}\}\n/.exec(SCRIPT_PAGES)?.[0];
const cents = runInNewContext(`(${source})`) as (v: unknown) => string;

it('rounds exact decimal strings half up to cents', () => {
  const cases: [unknown, string][] = [
    ['0', '0.00'],
    ['12', '12.00'],
    ['12.5', '12.50'],
    ['0.005', '0.01'],
    ['0.004999999', '<0.01'],
    ['0.000000001', '<0.01'],
    ['-0.001', '>-0.01'],
    ['-2.5', '-2.50'],
    ['-0.005', '-0.01'],
    ['0.999999999', '1.00'],
    ['1234567.895', '1,234,567.90'],
    // Past a float's exactness: 2^53 + 1 dollars and a half cent still round exactly.
    ['9007199254740993.005', '9,007,199,254,740,993.01'],
    ['999.994999999', '999.99'],
    [null, ''],
    ['n/a', 'n/a'],
  ];
  for (const [input, shown] of cases) expect(cents(input), String(input)).toBe(shown);
});
