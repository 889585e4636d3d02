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

/**
 * An account, key, brand or document id: 1-64 letters, digits, `_`, `-` and `.`, never `.` or
 * `..`. Ids go into URL paths (the admin API, the console), where `.` and `..` are dot
 * segments a browser resolves away (an account `..` could never be opened or deleted), and
 * into store keys and SQL text, where a control character breaks them.
 */
export const ENTITY_ID = /^(?!\.\.?$)[A-Za-z0-9_.-]{1,64}$/;
export const entityId = z
  .string()
  .min(1)
  .max(64)
  .regex(/^(?!\.\.?$)[A-Za-z0-9_.-]*$/, 'must be letters, digits, "_", "-" or ".", and not "." or ".."');

/**
 * A header value sent upstream: CR, LF or NUL in it would end the header (or be refused by the
 * HTTP client on every call), so it is refused in the config instead.
 */
export const headerValue = z.string().regex(/^[^\r\n\0]*$/, 'must not contain a line break (CR or LF) or NUL');

/**
 * A name looked up in a section by key (an upstream's): not one every object already has
 * (`toString`, `constructor`, `__proto__`), which a plain lookup would find on any object.
 */
export const sectionName = z.string().refine((name) => !(name in Object.prototype), { message: 'is a name every object has; choose another' });
