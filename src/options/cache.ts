/** The response cache's settings: top level (`cache`), and per model (`models[].cache`, or `false`). */
import { z } from 'zod';

/**
 * A hit's price as a fraction of the list cost of the stored answer: "0" free, "1" full price,
 * up to 12 decimals. Never more than the list price: a hit is the same answer, served for less.
 */
const hitPrice = z.string().regex(/^(?:0(?:\.\d{1,12})?|1(?:\.0{1,12})?)$/, 'must be a decimal fraction from "0" to "1", such as "0", "0.5" or "1"');

const fields = {
  /** How long an entry answers identical requests. @default 3600 */
  ttlSeconds: z.number().int().positive().max(31_536_000),
  /** What a hit costs, as a fraction of the list cost of the stored answer's usage. @default "0" */
  hitPrice,
  /** Whose requests share entries: the whole account's, or each key's own. @default "account" */
  scope: z.enum(['account', 'key']),
  /** An answer larger than this (its stored form, bytes) is not stored. @default 1048576 (1 MiB) */
  maxEntryBytes: z.number().int().positive(),
  /** Bytes of entries per account; storing one past it evicts the account's oldest. @default 67108864 (64 MiB) */
  maxBytesPerAccount: z.number().int().positive(),
};

/**
 * An exact-match cache of chat, completions, Messages and embeddings answers, off unless set.
 * @example { "ttlSeconds": 600, "hitPrice": "0.5" }
 */
export const cacheSchema = z.strictObject({
  ttlSeconds: fields.ttlSeconds.default(3600),
  hitPrice: fields.hitPrice.default('0'),
  scope: fields.scope.default('account'),
  maxEntryBytes: fields.maxEntryBytes.default(1024 * 1024),
  maxBytesPerAccount: fields.maxBytesPerAccount.default(64 * 1024 * 1024),
});

/** A model's own cache settings over the top level's (each field optional), or `false`: never cached. */
export const modelCacheSchema = z.union([z.literal(false), z.strictObject(fields).partial()]);

export type CacheConfig = z.output<typeof cacheSchema>;
export type ModelCacheConfig = z.output<typeof modelCacheSchema>;
