/**
 * Reading the CLI's flag values: the one error a mistake in them raises (one line, exit 1),
 * and the checks of required flags and USD amounts, done before anything touches a store.
 */
import { parseUsd } from '../billing/money.js';

export class UsageError extends Error {
  /** Whether the whole usage text helps (an unknown command), or the message says it all. */
  constructor(
    message: string,
    readonly showUsage = false,
  ) {
    super(message);
  }
}

export function need(value: string | undefined, flag: string): string {
  if (!value) throw new UsageError(`missing --${flag}`);
  return value;
}

/**
 * A USD amount from a flag, checked here so a typo reads as one line naming the flag:
 * digits with at most 9 decimal places, within what the books can hold, and more than 0
 * when `positive`.
 */
export function usd(value: string, flag: string, positive: boolean): string {
  const rule = `--${flag} must be ${positive ? 'more than 0' : '0 or more'} USD, with at most 9 decimal places (e.g. 12.5)`;
  if (!/^\d+(\.\d+)?$/.test(value)) throw new UsageError(`${rule}; got "${value}"`);
  let nano: bigint;
  try {
    nano = parseUsd(value);
  } catch (err) {
    throw new UsageError(`${rule}; got "${value}" (${(err as Error).message})`);
  }
  if (positive && nano === 0n) throw new UsageError(`${rule}; got "${value}"`);
  return value;
}

/**
 * A signed, non-zero USD amount (a wallet adjustment: "-2.5" takes money out). The same
 * exactness as `usd`: at most 9 decimal places, never through a float.
 */
export function signedUsd(value: string, flag: string): string {
  const rule = `--${flag} must be a signed USD amount other than 0, with at most 9 decimal places (e.g. -2.5 or 10)`;
  const m = /^(-?)(\d+(?:\.\d+)?)$/.exec(value);
  if (!m) throw new UsageError(`${rule}; got "${value}"`);
  let nano: bigint;
  try {
    nano = parseUsd(m[2]!);
  } catch (err) {
    throw new UsageError(`${rule}; got "${value}" (${(err as Error).message})`);
  }
  if (nano === 0n) throw new UsageError(`${rule}; got "${value}"`);
  return value;
}
