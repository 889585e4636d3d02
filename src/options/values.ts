/** Field validators shared by the sections of the options schema. */
import { z } from 'zod';
import { parsePrice, parseUsd } from '../billing/money.js';
import { describeValue } from './issues.js';

/** A price: a decimal string, never a JSON number (a float cannot hold every price exactly). */
export const decimalPrice = z
  .string({ error: (iss) => (iss.input === undefined ? undefined : `expected a decimal string such as "0.000001", got ${describeValue(iss.input)}`) })
  .refine(
  (s) => {
    try {
      parsePrice(s);
      return true;
    } catch {
      return false;
    }
  },
  { message: 'must be a USD decimal string with at most 12 decimal places, e.g. "0.000000075"' },
);

export const usdAmount = z.union([z.number(), z.string()]).refine(
  (v) => {
    try {
      parseUsd(v);
      return true;
    } catch {
      return false;
    }
  },
  { message: 'must be a non-negative USD amount with at most 9 decimal places' },
);

export const redisUrl = z.string().regex(/^rediss?:\/\/\S+$/, 'must be a Redis URL, e.g. "redis://10.0.0.7:6379"');
/** A secret may be left out, never empty: an empty one is an unset variable, not "no password". */
export const secret = z.string().min(1, 'must not be empty (leave it out when there is none)');

/** A spending budget per period (periods start 00:00 UTC; weeks on Monday). */
export const budgetSchema = z.strictObject({ usd: usdAmount, period: z.enum(['day', 'week', 'month']) });

/** A model allow-list entry: an exact model id, or a prefix ending in `*` ("acme/*"). */
export const modelPattern = z.string().regex(/^[^*]*\*?$/, 'must be a model id, or a prefix ending in "*"').min(1);
