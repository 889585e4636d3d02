/**
 * Rate windows and token windows in the SQLite file, so every process on the file counts in the
 * same windows (`serve --workers N`): a limit is exact across them, as on PostgreSQL and Redis.
 *
 * Each operation is one atomic step inside an IMMEDIATE transaction (a group commit's, see
 * `SqliteContext.batch`): the write lock is taken before the window is read, so the count and
 * the write are one step against every other process on the file. A key's hit can run inside
 * its hold's step (`hitIn`), so a billed call's check and hold share one commit.
 *
 * A window's hits are one row per millisecond with a count, clustered on (bucket, at), and the
 * window keeps how many it counts beside them (`rate_windows`): a hit deletes what left the
 * window (amortised O(1)), reads the count and the oldest hit through the keys, and never sums
 * the window, however busy it is. Token takes are one row per call that took tokens (a take is
 * corrected by its id); a window holds only the takes its limit admitted.
 */
import type { TokenResult, WindowResult } from '../types.js';
import { num, type SqliteContext } from './connection.js';

/** How long an idle window's rows are kept before the sweep deletes them (windows are a minute). */
export const WINDOW_ROWS_TTL_MS = 60 * 60 * 1000;

export interface SqliteWindows {
  /** Counts a hit if under the limit, inside the caller's transaction. */
  hitIn(bucket: string, limit: number, windowMs: number, t: number): WindowResult;
  hit(bucket: string, limit: number, windowMs: number): Promise<WindowResult>;
  takeTokens(bucket: string, takeId: string, tokens: number, limit: number, windowMs: number): Promise<TokenResult>;
  setTokens(bucket: string, takeId: string, tokens: number): Promise<void>;
}

export function createSqliteWindows(ctx: SqliteContext): SqliteWindows {
  const q = {
    trim: ctx.prepare('DELETE FROM rate_hits WHERE bucket = ? AND at <= ? RETURNING n').pluck(),
    counted: ctx.prepare('SELECT hits FROM rate_windows WHERE bucket = ?').pluck(),
    setCounted: ctx.prepare(
      'INSERT INTO rate_windows (bucket, hits, last) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET hits = excluded.hits, last = excluded.last',
    ),
    oldest: ctx.prepare('SELECT at FROM rate_hits WHERE bucket = ? ORDER BY at LIMIT 1').pluck(),
    count: ctx.prepare('INSERT INTO rate_hits (bucket, at, n) VALUES (?, ?, 1) ON CONFLICT DO UPDATE SET n = n + 1'),
    trimTakes: ctx.prepare('DELETE FROM token_takes WHERE bucket = ? AND at <= ?'),
    used: ctx.prepare('SELECT coalesce(sum(tokens), 0) AS used, min(at) AS oldest FROM token_takes WHERE bucket = ?'),
    hasTake: ctx.prepare('SELECT 1 FROM token_takes WHERE bucket = ? AND take_id = ?').pluck(),
    take: ctx.prepare('INSERT INTO token_takes (bucket, take_id, at, tokens) VALUES (?, ?, ?, ?)'),
    takes: ctx.prepare('SELECT at, tokens FROM token_takes WHERE bucket = ? ORDER BY at, take_id'),
    setTake: ctx.prepare('UPDATE token_takes SET tokens = ? WHERE bucket = ? AND take_id = ?'),
  };

  function hitIn(bucket: string, limit: number, windowMs: number, t: number): WindowResult {
    let left = 0;
    for (const n of q.trim.iterate(bucket, t - windowMs) as Iterable<number>) left += n;
    const n = num(q.counted.get(bucket)) - left;
    const allowed = n < limit;
    if (allowed) q.count.run(bucket, t);
    // The count is written when it moved: a refused hit on a full window writes nothing.
    if (allowed || left > 0) q.setCounted.run(bucket, allowed ? n + 1 : n, t);
    const first = q.oldest.get(bucket) as number | undefined;
    const oldest = first === undefined ? null : num(first);
    return {
      allowed,
      limit,
      remaining: allowed ? limit - n - 1 : 0,
      resetMs: oldest === null ? 0 : Math.max(0, oldest + windowMs - t),
    };
  }

  /** Refused: ms until enough takes have left for `tokens` to fit; -1 when they never fit. */
  function refusedReset(bucket: string, tokens: number, limit: number, used: number, windowMs: number, t: number): number {
    if (tokens > limit) return -1;
    let free = limit - used;
    for (const r of q.takes.iterate(bucket) as Iterable<{ at: number; tokens: number }>) {
      free += num(r.tokens);
      if (free >= tokens) return Math.max(1, num(r.at) + windowMs - t);
    }
    return -1;
  }

  function takeIn(bucket: string, takeId: string, tokens: number, limit: number, windowMs: number, t: number): TokenResult {
    q.trimTakes.run(bucket, t - windowMs);
    const w = q.used.get(bucket) as { used: number; oldest: number | null };
    let used = num(w.used);
    // A take id the window holds already is not taken twice.
    const held = q.hasTake.get(bucket, takeId) !== undefined;
    if (held || used + tokens <= limit) {
      if (!held) {
        q.take.run(bucket, takeId, t, tokens);
        used += tokens;
      }
      const oldest = w.oldest === null ? t : num(w.oldest);
      return { allowed: true, limit, remaining: Math.max(0, limit - used), resetMs: Math.max(0, oldest + windowMs - t) };
    }
    return { allowed: false, limit, remaining: Math.max(0, limit - used), resetMs: refusedReset(bucket, tokens, limit, used, windowMs, t) };
  }

  return {
    hitIn,
    hit: (bucket, limit, windowMs) => ctx.batch('hit', () => hitIn(bucket, limit, windowMs, ctx.now())),
    takeTokens: (bucket, takeId, tokens, limit, windowMs) => ctx.batch('takeTokens', () => takeIn(bucket, takeId, tokens, limit, windowMs, ctx.now())),
    async setTokens(bucket, takeId, tokens) {
      // A take that left the window (its row trimmed) changes nothing.
      await ctx.batch('setTokens', () => q.setTake.run(tokens, bucket, takeId));
    },
  };
}
