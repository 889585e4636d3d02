/**
 * An admin body's number literal with more significant digits than a double keeps is found
 * (with the key it is under) before JSON.parse rounds it: the key, not a look at the parsed
 * value, is what can tell 8707823.091482731 from 8707823.09148273.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { inexactNumber } from '../../src/admin/exact-numbers.js';

describe('inexactNumber', () => {
  it('finds a literal past 15 significant digits, with its key; strings and short numbers pass', () => {
    expect(inexactNumber('{"amountUsd":8707823.091482731,"reason":"x"}')).toEqual({ key: 'amountUsd', literal: '8707823.091482731' });
    expect(inexactNumber('{"budgets":[{"usd":0.1234567890123456,"period":"day"}]}')).toEqual({ key: 'usd', literal: '0.1234567890123456' });
    expect(inexactNumber('[12345678901234567]')).toEqual({ key: null, literal: '12345678901234567' });
    // An integer up to 2^53 is exact, 16 digits or not.
    expect(inexactNumber('{"limit":9007199254740992}')).toBeNull();
    expect(inexactNumber('{"limit":9007199254740993}')).toEqual({ key: 'limit', literal: '9007199254740993' });
    expect(inexactNumber('{"walletUsd":-9007199254740993e-9}')).toEqual({ key: 'walletUsd', literal: '-9007199254740993e-9' });
    // Leading and trailing zeros are not significant.
    expect(inexactNumber('{"a":0.000000123456789012345,"b":100000000000000000000,"c":1.500000000000000000}')).toBeNull();
    // A number inside a string, or a key that looks like one, is text.
    expect(inexactNumber('{"reason":"12345678901234567890 \\" 98765432109876543210","12345678901234567":1}')).toBeNull();
    expect(inexactNumber('{"amountUsd":"8707823.091482731"}')).toBeNull();
  });

  it('passes every literal a double carries exactly (up to 15 digits), and finds every longer one', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[1-9]\d{0,20}$/), fc.nat({ max: 20 }), (digits, point) => {
        const at = Math.min(point, digits.length);
        const literal = at === 0 ? digits : `${digits.slice(0, at)}.${digits.slice(at) || '0'}`;
        const digitsOf = (text: string) => text.split('e')[0]!.replace('.', '').replace(/^0+/, '').replace(/0+$/, '');
        const significant = digitsOf(literal).length;
        const found = inexactNumber(`{"k":${literal}}`);
        expect(found !== null).toBe(significant > 15 && !(at === 0 && BigInt(digits) <= 2n ** 53n));
        // What passes is what a double keeps: its 15 digits are the literal's.
        if (found === null) expect(digitsOf(Number(literal).toPrecision(15))).toBe(digitsOf(literal));
      }),
    );
  });
});
