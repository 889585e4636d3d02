/**
 * A JSON number is read as a double, exact to 15 significant digits: "8707823.091482731" sent
 * as a number arrives as 8707823.09148273, and no check after JSON.parse can tell. Admin bodies
 * carry money, so a number literal with more significant digits than that is refused, naming
 * its field, before the body is parsed (amounts go exactly as decimal strings).
 */
import { GatewayError } from '../errors.js';

const NUMBER = /-?(\d+)(?:\.(\d+))?(?:[eE][+-]?\d+)?/y;
const MAX_EXACT_DIGITS = 15;

function significantDigits(int: string, frac: string): number {
  return (int + frac).replace(/^0+/, '').replace(/0+$/, '').length;
}

/** An integer literal a double carries exactly (at most 2^53), however many digits it has. */
const exactInteger = (literal: string) => /^-?\d+$/.test(literal) && BigInt(literal.replace('-', '')) <= 2n ** 53n;

/** The first number literal in a JSON text that a double cannot carry exactly, with the key it is under. */
export function inexactNumber(text: string): { key: string | null; literal: string } | null {
  let key: string | null = null;
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      // A string: skip it whole (escapes included); followed by ':' it is the key of what comes next.
      let j = i + 1;
      while (j < text.length && text.charCodeAt(j) !== 34) j += text.charCodeAt(j) === 92 ? 2 : 1;
      let k = j + 1;
      while (k < text.length && ' \t\r\n'.includes(text[k]!)) k++;
      if (text[k] === ':') {
        try {
          key = JSON.parse(text.slice(i, j + 1)) as string;
        } catch {
          key = null;
        }
      }
      i = j + 1;
      continue;
    }
    if (c === 45 || (c >= 48 && c <= 57)) {
      NUMBER.lastIndex = i;
      const m = NUMBER.exec(text);
      if (m) {
        if (significantDigits(m[1]!, m[2] ?? '') > MAX_EXACT_DIGITS && !exactInteger(m[0])) return { key, literal: m[0] };
        i = NUMBER.lastIndex;
        continue;
      }
    }
    i++;
  }
  return null;
}

/** Throws 400 naming the field when a number in the body has more digits than a double keeps. */
export function refuseInexactNumbers(text: string): void {
  const found = inexactNumber(text);
  if (!found) return;
  const literal = found.literal.slice(0, 60);
  throw new GatewayError(
    'invalid_request',
    `${found.key ?? 'body'}: the number ${literal} has more than ${MAX_EXACT_DIGITS} significant digits, which a JSON number does not carry exactly; send it as a decimal string ("${literal}").`,
    { param: found.key },
  );
}
