/**
 * API keys: generation, digests, and the bearer check. Stores only ever see the SHA-256
 * digest and a short display prefix; the plain key exists once, at creation.
 */
import * as crypto from 'node:crypto';
import { createHash, randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { GatewayError } from '../errors.js';
import type { ApiKeyRecord, KeyStore } from '../stores/types.js';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export const KEY_PREFIX = 'sk-mg-';
const KEY_PATTERN = /^sk-mg-[A-Za-z0-9]{40,200}$/;

/** Uniform random base62 string (rejection sampling: no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

/** `sk-mg-` + 44 base62 characters: about 262 bits. */
export function generateKey(): string {
  return KEY_PREFIX + randomBase62(44);
}

// Node >= 20.12 has the one-shot crypto.hash, about twice as fast as a Hash object per call.
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'hex') => string }).hash;

export function digestKey(plain: string): string {
  return oneShot ? oneShot('sha256', plain, 'hex') : createHash('sha256').update(plain).digest('hex');
}

/** Non-secret display prefix: "sk-mg-" and 4 characters. */
export function displayPrefix(plain: string): string {
  return plain.slice(0, KEY_PREFIX.length + 4);
}

/**
 * An id as an error message may show it: one that looks like a secret key (ours, or any
 * `sk-` key pasted where an id belongs) is cut to its display prefix, since messages never
 * carry key material; any other id is shown, up to 200 characters.
 */
export function shownId(id: string): string {
  // A key pasted with its header's scheme or a stray space is a key all the same.
  const key = /^\s*(?:Bearer\s+)?(sk-\S*)/i.exec(id)?.[1];
  return key !== undefined ? `${displayPrefix(key)}…` : id.slice(0, 200);
}

/** Seeded keys get an id derived from their digest, so every instance seeds the same id. */
export function keyIdFor(digest: string): string {
  return `key_${digest.slice(0, 24)}`;
}

export interface Authenticator {
  /**
   * The key an Authorization header names, or a thrown 401. Answered synchronously (no
   * promise) when the key is cached; a promise when the store must be asked.
   */
  authenticate(authorization: string | null): ApiKeyRecord | Promise<ApiKeyRecord>;
  /** Forget a cached key (after disable) on this instance. */
  forget(digest: string): void;
}

const unauthorized = (message: string) => new GatewayError('invalid_api_key', message);

/** The key found for `plain` (false: none), or the 401 for an unknown or disabled one. */
function admit(record: ApiKeyRecord | false, plain: string): ApiKeyRecord {
  if (!record) throw unauthorized(`Incorrect API key provided: ${displayPrefix(plain)}…`);
  if (record.disabled) throw unauthorized(`The API key ${record.prefix}… has been disabled.`);
  return record;
}

/**
 * Looks keys up by digest, caching answers briefly (`cacheTtlMs`) so a hot key costs no
 * store round trip. A disabled key is refused; another instance sees a disable within the TTL.
 */
export function createAuthenticator(keys: KeyStore, cacheTtlMs = 5_000): Authenticator {
  const cache = new LRUCache<string, ApiKeyRecord | false>({ max: 10_000, ttl: cacheTtlMs });
  return {
    authenticate(authorization) {
      if (!authorization) {
        throw unauthorized('Missing API key. Send it as "Authorization: Bearer <key>".');
      }
      const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
      const plain = match?.[1];
      if (!plain || !KEY_PATTERN.test(plain)) {
        throw unauthorized('Malformed API key. Keys look like "sk-mg-" followed by letters and digits.');
      }
      const digest = digestKey(plain);
      const cached = cache.get(digest);
      if (cached !== undefined) return admit(cached, plain);
      return keys.findByDigest(digest).then((found) => {
        const record = found ?? false;
        cache.set(digest, record);
        return admit(record, plain);
      });
    },
    forget(digest) {
      cache.delete(digest);
    },
  };
}
