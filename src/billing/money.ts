/**
 * Exact money. Nothing on the money path is a floating-point number.
 *
 * - Prices are decimal USD strings with up to 12 decimal places; they are parsed to
 *   pico-USD (1e-12 USD) bigints, so every accepted price is exact.
 * - Balances, holds, charges and the ledger are nano-USD (1e-9 USD) bigints: the
 *   gateway's minor unit. A call's cost is price x units computed exactly in pico-USD,
 *   then rounded UP to the next nano-USD, once per call.
 * - Nano-USD keeps every realistic amount below 2^53 (about 9 million USD), so the
 *   Redis Lua scripts (whose numbers are doubles) stay exact as well.
 */

export const NANO_PER_USD = 1_000_000_000n;
export const PICO_PER_NANO = 1_000n;
/** Largest amount any store accepts: 2^53 - 1 nano-USD (~9,007,199 USD). */
export const MAX_NANO = 9_007_199_254_740_991n;

const DECIMAL = /^(\d{1,15})(?:\.(\d{1,12}))?$/;

function parseDecimal(value: string, scaleDigits: number, what: string): bigint {
  const m = DECIMAL.exec(value.trim());
  if (!m) throw new RangeError(`${what} must be a non-negative decimal string, got ${JSON.stringify(value)}`);
  const whole = m[1] ?? '0';
  const frac = m[2] ?? '';
  if (frac.length > scaleDigits) {
    throw new RangeError(`${what} has more than ${scaleDigits} decimal places: ${value}`);
  }
  return BigInt(whole) * 10n ** BigInt(scaleDigits) + BigInt(frac.padEnd(scaleDigits, '0') || '0');
}

/** "0.000000075" (USD per unit) -> 75_000n pico-USD. Up to 12 decimals. */
export function parsePrice(value: string): bigint {
  return parseDecimal(value, 12, 'price');
}

/**
 * A USD amount (wallet, cap, top-up) -> nano-USD. Accepts a decimal string or a JSON
 * number; a number is read through its shortest decimal form, so 10.5 is exactly 10.5.
 */
export function parseUsd(value: string | number): bigint {
  let text: string;
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new RangeError(`amount must be a non-negative number, got ${value}`);
    text = numberToPlainDecimal(value);
  } else {
    text = value;
  }
  const nano = parseDecimal(text, 9, 'amount');
  if (nano > MAX_NANO) throw new RangeError(`amount is too large: ${text}`);
  return nano;
}

function numberToPlainDecimal(value: number): string {
  const s = String(value);
  if (!/e/i.test(s)) return s;
  // Exponent form (1e-7, 1e21): expand the shortest representation digit by digit.
  const [mantissa = '0', expPart = '0'] = s.toLowerCase().split('e');
  const exp = Number(expPart);
  const [intDigits = '0', fracDigits = ''] = mantissa.split('.');
  const digits = intDigits + fracDigits;
  const point = intDigits.length + exp;
  if (point <= 0) return `0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return digits + '0'.repeat(point - digits.length);
  return `${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** Exact cost of `units` at `pricePico` per unit, rounded up to the nano-USD. */
export function cost(pricePico: bigint, units: bigint | number): bigint {
  const u = typeof units === 'bigint' ? units : BigInt(units);
  if (u < 0n || pricePico < 0n) throw new RangeError('cost of a negative quantity');
  const pico = pricePico * u;
  return (pico + PICO_PER_NANO - 1n) / PICO_PER_NANO;
}

/** Sum of exact costs, rounded up once (for a call billed on two prices, e.g. prompt + completion). */
export function costOf(parts: Array<[pricePico: bigint, units: bigint | number]>): bigint {
  let pico = 0n;
  for (const [price, units] of parts) pico += price * (typeof units === 'bigint' ? units : BigInt(units));
  return (pico + PICO_PER_NANO - 1n) / PICO_PER_NANO;
}

/**
 * The sum of exact costs times `fraction` (a decimal string, up to 12 places: "0.5"), rounded
 * up once to the nano-USD: a cache hit billed at a fraction of the list cost, exactly.
 */
export function costOfScaled(parts: Array<[pricePico: bigint, units: bigint | number]>, fraction: string): bigint {
  const scaled = parsePrice(fraction); // the fraction in millionths of millionths (10^-12)
  let pico = 0n;
  for (const [price, units] of parts) pico += price * (typeof units === 'bigint' ? units : BigInt(units));
  const den = PICO_PER_NANO * 1_000_000_000_000n;
  return (pico * scaled + den - 1n) / den;
}

/**
 * The most `units` that `budgetNano` pays for at `pricePico` each, after `fixedNano`
 * is taken out first; never negative. Used for "you can only afford M tokens".
 */
export function affordableUnits(budgetNano: bigint, fixedPico: bigint, pricePico: bigint): bigint {
  const room = budgetNano * PICO_PER_NANO - fixedPico;
  if (room <= 0n) return 0n;
  if (pricePico === 0n) return room > 0n ? MAX_NANO : 0n;
  return room / pricePico;
}

/** 10^0 .. 10^12 as bigints, so formatting computes no power (it runs for every access line). */
const POWERS_OF_TEN = Array.from({ length: 13 }, (_, i) => 10n ** BigInt(i));

function formatScaled(value: bigint, scaleDigits: number): string {
  const negative = value < 0n;
  const abs = negative ? -value : value;
  const scale = POWERS_OF_TEN[scaleDigits] ?? 10n ** BigInt(scaleDigits);
  const whole = abs / scale;
  const rest = abs % scale;
  const sign = negative ? '-' : '';
  if (rest === 0n) return `${sign}${whole}`;
  // The fraction's digits, left-padded to the scale, without its trailing zeros.
  let frac = rest.toString().padStart(scaleDigits, '0');
  let end = frac.length;
  while (frac.charCodeAt(end - 1) === 48) end--;
  if (end < frac.length) frac = frac.slice(0, end);
  return `${sign}${whole}.${frac}`;
}

/** 75_000n pico -> "0.000000075". */
export function formatPrice(pricePico: bigint): string {
  return formatScaled(pricePico, 12);
}

/** nano-USD -> exact decimal string, e.g. 75_000_000n -> "0.075". */
export function formatUsd(nano: bigint): string {
  return formatScaled(nano, 9);
}

/**
 * nano-USD -> a JSON number for display (GET /key). Display only: the value is
 * produced from the exact decimal string, never used for arithmetic.
 */
export function usdNumber(nano: bigint): number {
  return Number(formatUsd(nano));
}
