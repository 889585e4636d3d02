import { randomUUID } from 'node:crypto';

/**
 * A new request id: `req_` and 32 hex digits laid out as a UUIDv7 (RFC 9562): the time in
 * unix ms first, then 74 random bits. The request id is also the call's hold id and ledger
 * entry id, and the books index those (SQLite's and PostgreSQL's ledger and closed-hold
 * indexes). Ids that rise with time land at the end of those indexes, so a commit writes
 * their last page once instead of one page anywhere in the index per call; random ids (v4)
 * made most of the pages a billed call wrote in SQLite. The random part comes from
 * randomUUID, which draws from a cached entropy pool: far cheaper per request than randomBytes.
 */
export function newRequestId(now: number = Date.now()): string {
  const r = randomUUID(); // xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx (V: the variant, kept)
  return `req_${now.toString(16).padStart(12, '0')}7${r.slice(15, 18)}${r.slice(19, 23)}${r.slice(24)}`;
}
