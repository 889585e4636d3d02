/**
 * Every Lua script of the Redis stores, in one place.
 *
 * Scripts are registered with ioredis `defineCommand`, so each call is one EVALSHA (ioredis
 * sends the body with EVAL once per connection, then the SHA). Rules every script follows:
 *
 * - Every key a script touches is passed in KEYS and all of them share one hash tag (one
 *   account, one rate bucket, one lease pool, one job), so the scripts run on Redis Cluster.
 * - Time comes from Redis `TIME` (Redis 7 replicates script effects, so that is allowed),
 *   never from an instance clock.
 * - Money arrives and leaves as decimal integer strings. Inside Lua numbers are doubles, exact
 *   below 2^53 (the gateway keeps every amount below MAX_NANO = 2^53 - 1); integers go back to
 *   Redis through `fmt` ('%.0f', exact for such doubles) and are changed with INCRBY/DECRBY/
 *   HINCRBY, which are exact 64-bit operations.
 */
import type { RedisClient } from './clients.js';

/**
 * Shared helpers, prepended to the scripts that need them. A script's top-level locals live for
 * one run of it: one script sent alone, or every operation of one mgBatch, which then share
 * what the helpers remember below.
 */
const PRELUDE = `
-- One clock reading per run: the operations of one batch happen at one instant, as the
-- batch is one atomic step.
local T_NOW
local function now_ms()
  if not T_NOW then
    local t = redis.call('TIME')
    T_NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return T_NOW
end
-- True while mgBatch runs: work that only has to be right once the run ends (a key's expiry)
-- is then done once at its end instead of after every operation.
local IN_BATCH = false
-- An integer as a decimal string ('-0' never appears: Redis would refuse it).
local function fmt(x)
  if x == 0 then return '0' end
  return string.format('%.0f', x)
end
local function num(v)
  if v then return tonumber(v) end
  return 0
end
`;

/** Open holds of one account: a hash of holds, a zset of their expiries, a hash of held sums. */
const HOLDS = `
local function add_held(held, field, delta)
  if delta == 0 then return end
  if redis.call('HINCRBY', held, field, fmt(delta)) == 0 then redis.call('HDEL', held, field) end
end
local function drop_hold(holds, hexp, held, id, raw)
  local h = cjson.decode(raw)
  local a = tonumber(h.a)
  add_held(held, 'all', -a)
  add_held(held, h.kf, -a)
  redis.call('HDEL', holds, id)
  redis.call('ZREM', hexp, id)
  return h, a
end
-- The accounts this run has pruned, with the time it pruned them at.
local PRUNED = {}
-- Expired holds stop counting: drop every hold whose expiry is at or before t. Once per
-- account and instant: a second prune at the same t would find nothing (a hold placed since
-- expires later, or un-marks its account; see place_hold).
local function prune(holds, hexp, held, t)
  if PRUNED[hexp] == t then return end
  local dead = redis.call('ZRANGEBYSCORE', hexp, '-inf', fmt(t))
  for i = 1, #dead do
    local raw = redis.call('HGET', holds, dead[i])
    if raw then drop_hold(holds, hexp, held, dead[i], raw) else redis.call('ZREM', hexp, dead[i]) end
  end
  PRUNED[hexp] = t
end
`;

/** A sorted set of id -> expiry (ms) lives exactly as long as its last member. Needs PRELUDE. */
const EXPIRE_WITH_LAST = `
local function expire_with_last(zset, ...)
  local last = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', zset, last[2])
    for _, k in ipairs({...}) do redis.call('PEXPIREAT', k, last[2]) end
  end
end
-- Sorted sets (with the keys that live as long) whose expiry is due, once each, in order.
local EXPIRY_DUE, EXPIRY_LIST = {}, {}
local function expire_later(zset, a, b)
  if EXPIRY_DUE[zset] then return end
  EXPIRY_DUE[zset] = true
  EXPIRY_LIST[#EXPIRY_LIST + 1] = {zset, a, b}
end
-- Brings the due expiries up to date: after each operation sent alone, at the end of a batch.
-- The keys can vanish and come back within a batch (a settle drops the last hold, a hold
-- opens another), so the expiry is set from what is left once the batch is done.
local function expire_due()
  if IN_BATCH then return end
  for i = 1, #EXPIRY_LIST do
    local e = EXPIRY_LIST[i]
    expire_with_last(e[1], e[2], e[3])
  end
  EXPIRY_DUE, EXPIRY_LIST = {}, {}
end
`;

/** Hold-if-affordable on one account's keys (see mgPlaceHold). Needs PRELUDE, HOLDS, EXPIRE_WITH_LAST. */
const PLACE_HOLD = `
-- budgets: {cap, spend field, held field, source, cap, ...}: spend in the period plus the
-- scope's open holds plus the amount must stay within each cap.
-- Returns {1} when held (or already open), else {0, limitSource, available}.
local function place_hold(bal, holds, hexp, held, spend, id, amount_s, cap_s, ttl, kf, mf, tf, t, budgets)
  prune(holds, hexp, held, t)
  -- Placing an open hold again is a no-op, so a retried call cannot hold twice.
  if redis.call('HEXISTS', holds, id) == 1 then return {1} end
  local amount = tonumber(amount_s)
  local free = num(redis.call('GET', bal)) - num(redis.call('HGET', held, 'all'))
  if free < amount then
    if free < 0 then free = 0 end
    return {0, 'wallet', fmt(free)}
  end
  if cap_s ~= '' then
    local room = tonumber(cap_s) - num(redis.call('HGET', spend, mf)) - num(redis.call('HGET', held, kf))
    if room < amount then
      if room < 0 then room = 0 end
      return {0, 'key_monthly_cap', fmt(room)}
    end
  end
  for i = 1, #budgets, 4 do
    local room = tonumber(budgets[i]) - num(redis.call('HGET', spend, budgets[i + 1])) - num(redis.call('HGET', held, budgets[i + 2]))
    if room < amount then
      if room < 0 then room = 0 end
      return {0, budgets[i + 3], fmt(room)}
    end
  end
  redis.call('HSET', holds, id, cjson.encode({a = amount_s, kf = kf, mf = mf, tf = tf}))
  redis.call('ZADD', hexp, fmt(t + tonumber(ttl)), id)
  -- A hold that expires at this instant must be pruned by the next operation at it.
  if t + tonumber(ttl) <= t then PRUNED[hexp] = nil end
  add_held(held, 'all', amount)
  add_held(held, kf, amount)
  -- The hold keys vanish together once the last hold has expired.
  expire_later(hexp, holds, held)
  return {1}
end
`;

/**
 * An exact sliding window: a sorted set of one unique member per counted hit, scored by its
 * time (ms). Trimming is one ZREMRANGEBYSCORE over the hits that left (O(log n) plus what it
 * removes, so each hit is trimmed once, amortised O(log n) per hit however high the limit);
 * the count is ZCARD (O(1)) and the oldest hit one ZRANGE (O(log n)). Within one run the
 * clock stands still, so a window is trimmed and read once: a later hit of the same run
 * costs one ZADD. Needs PRELUDE.
 */
const WINDOW = `
-- What this run knows of each window it has read: its span, the instant it was trimmed at,
-- its count, its oldest hit and whether its expiry is set. Only this run's hits change it. A
-- window of 0 ms is never remembered: its trim drops the hits of this very instant.
local WINDOWS = {}
-- Returns allowed (0 | 1), remaining, ms until the oldest counted hit leaves.
local function window_hit(key, limit, w, member, t)
  local s = WINDOWS[key]
  if not s or s.w ~= w or s.t ~= t or w <= 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(t - w))
    s = {w = w, t = t, n = redis.call('ZCARD', key), expiring = false}
    if s.n > 0 then s.first = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) end
    WINDOWS[key] = s
  end
  local allowed = 0
  if s.n < limit then
    redis.call('ZADD', key, fmt(t), member)
    s.n = s.n + 1
    if not s.first or t < s.first then s.first = t end
    allowed = 1
  end
  local reset = 0
  if s.n > 0 then
    reset = s.first + w - t
    if reset < 0 then reset = 0 end
    -- The newest hit leaves the window within w, so an idle bucket disappears.
    if not s.expiring then
      redis.call('PEXPIRE', key, fmt(w))
      s.expiring = true
    end
  end
  local remaining = 0
  if allowed == 1 then remaining = limit - s.n end
  return allowed, remaining, reset
end
`;

const DOC_VERSION = `
-- The documents version only grows: max(old + 1, now in ms), so it never repeats even
-- after the key was lost.
local function bump(ver)
  local v = num(redis.call('GET', ver)) + 1
  local t = now_ms()
  if t > v then v = t end
  redis.call('SET', ver, fmt(v))
  return v
end
`;

interface ScriptDef {
  numberOfKeys: number;
  lua: string;
}

/** A script that can also run inside mgBatch: its helpers and its body kept apart. */
interface BatchableDef extends ScriptDef {
  helpers: readonly string[];
  body: string;
}

function batchable(numberOfKeys: number, helpers: readonly string[], body: string): BatchableDef {
  return { numberOfKeys, lua: helpers.join('') + body, helpers, body };
}

export const SCRIPTS = {
  /**
   * Hold-if-affordable.
   * KEYS: balance, holds, hold expiries, held sums, spend
   * ARGV: holdId, amount, monthlyCap ('' = none), ttlMs, held field of the key,
   *       monthly spend field, all-time spend field, then per budget: cap, spend field of its
   *       period, held field of its scope, its name
   * Returns {1} or {0, limitSource, available}.
   */
  mgPlaceHold: batchable(5, [PRELUDE, HOLDS, EXPIRE_WITH_LAST, PLACE_HOLD], `
local h = place_hold(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], now_ms(), {unpack(ARGV, 8)})
expire_due()
return h
`),

  /**
   * A key's window hit, then (only when the window allowed it) hold-if-affordable, in one
   * step: the window key lives under the account's hash tag, beside the hold's keys.
   * KEYS: window (zset of hit -> ms), balance, holds, hold expiries, held sums, spend
   * ARGV: limit, windowMs, unique member, then mgPlaceHold's ARGV (holdId, amount,
   *       monthlyCap, ttlMs, held field, monthly spend field, all-time spend field, budgets)
   * Returns {0, 0, resetMs} (refused by the window, nothing held), {1, remaining, resetMs, 1}
   * (counted and held) or {1, remaining, resetMs, 0, limitSource, available} (counted, not held).
   */
  mgHitPlaceHold: batchable(6, [PRELUDE, HOLDS, EXPIRE_WITH_LAST, PLACE_HOLD, WINDOW], `
local t = now_ms()
local allowed, remaining, reset = window_hit(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], t)
if allowed == 0 then return {0, 0, reset} end
local h = place_hold(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], t, {unpack(ARGV, 11)})
expire_due()
return {1, remaining, reset, h[1], h[2], h[3]}
`),

  /**
   * Settle, idempotent per holdId for good: debits the full list cost (even past the hold),
   * whether or not the hold is still open (an expired hold's output was still delivered).
   * The account's ledger index names every hold id its ledger has an entry of, with that
   * entry's position, so a settle replayed however late (from the settle journal of an
   * instance that was away for days) finds its entry and changes nothing. The index is kept
   * for good, as the entries are: one small field beside each entry, no marker per call.
   * KEYS: balance, holds, hold expiries, held sums, spend, ledger, ledger index, closed marker
   *       of the hold (written by a release)
   * ARGV: holdId, list cost, ledger entry JSON without "cost"/"held"/"exceededHold" (an object,
   *       ends with '}'), monthly spend field (of the month the charge is dated in) and all-time
   *       spend field, then the period spend fields the cost also counts in (the key's and the
   *       account's day, week and month)
   * Returns {1, charged, held} or {0, '0'}.
   */
  mgSettle: batchable(8, [PRELUDE, HOLDS], `
local bal, holds, hexp, held, spend, ledger, index, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local t = now_ms()
prune(holds, hexp, held, t)
-- A replayed settle (resent after a reconnect, or from the settle journal) finds its entry in
-- the index; a settle after release finds the release's marker (and books written before the
-- index find the settle marker they wrote then, which lives a day): nothing changes.
if redis.call('HEXISTS', index, ARGV[1]) == 1 or redis.call('EXISTS', done) == 1 then return {0, '0'} end
-- The spend counts in the month the charge is dated in (ARGV[4], from the settle), as the
-- ledger entry and the period budgets do, never in the month the hold was placed.
local mf, tf, amount = ARGV[4], ARGV[5], 0
local raw = redis.call('HGET', holds, ARGV[1])
if raw then
  local _
  _, amount = drop_hold(holds, hexp, held, ARGV[1], raw)
end
local cost = tonumber(ARGV[2])
local c = fmt(cost)
if cost > 0 then
  redis.call('DECRBY', bal, c)
  redis.call('HINCRBY', spend, mf, c)
  redis.call('HINCRBY', spend, tf, c)
  for i = 6, #ARGV do redis.call('HINCRBY', spend, ARGV[i], c) end
end
local exceeded = 'false'
if cost > amount then exceeded = 'true' end
local n = redis.call('RPUSH', ledger, string.sub(ARGV[3], 1, -2) .. ',"cost":"' .. c .. '","held":"' .. fmt(amount) .. '","exceededHold":' .. exceeded .. '}')
redis.call('HSET', index, ARGV[1], n)
return {1, c, fmt(amount)}
`),

  /**
   * Release: drops the hold without charging and closes the hold id.
   * KEYS: holds, hold expiries, held sums, closed marker of the hold. ARGV: holdId, marker TTL ms.
   * Returns 1 when an open hold was dropped.
   */
  mgRelease: batchable(4, [PRELUDE, HOLDS], `
prune(KEYS[1], KEYS[2], KEYS[3], now_ms())
redis.call('SET', KEYS[4], 'r', 'NX', 'PX', ARGV[2])
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
drop_hold(KEYS[1], KEYS[2], KEYS[3], ARGV[1], raw)
return 1
`),

  /**
   * Renew: moves an open hold's expiry to now + ttl.
   * KEYS: holds, hold expiries, held sums. ARGV: holdId, ttl ms. Returns 1 when renewed.
   */
  mgRenewHold: {
    numberOfKeys: 3,
    lua:
      PRELUDE +
      HOLDS +
      EXPIRE_WITH_LAST +
      `
local t = now_ms()
prune(KEYS[1], KEYS[2], KEYS[3], t)
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], fmt(t + tonumber(ARGV[2])), ARGV[1])
expire_with_last(KEYS[2], KEYS[1], KEYS[3])
return 1
`,
  },

  /** KEYS: balance, holds, hold expiries, held sums. Returns {balance, held}. */
  mgWallet: {
    numberOfKeys: 4,
    lua:
      PRELUDE +
      HOLDS +
      `
prune(KEYS[2], KEYS[3], KEYS[4], now_ms())
return {redis.call('GET', KEYS[1]) or '0', redis.call('HGET', KEYS[4], 'all') or '0'}
`,
  },

  /**
   * KEYS: holds, hold expiries, held sums, spend. ARGV: held field, monthly field, total field.
   * Returns {total, monthly, held}.
   */
  mgKeyUsage: {
    numberOfKeys: 4,
    lua:
      PRELUDE +
      HOLDS +
      `
prune(KEYS[1], KEYS[2], KEYS[3], now_ms())
return {
  redis.call('HGET', KEYS[4], ARGV[3]) or '0',
  redis.call('HGET', KEYS[4], ARGV[2]) or '0',
  redis.call('HGET', KEYS[3], ARGV[1]) or '0',
}
`,
  },

  /**
   * The audit's read of an account's holds: one HSCAN page of the holds hash with each hold's
   * expiry, as kept (nothing pruned: the audit looks for holds kept past expiry, and a hold
   * missing from the expiry set would never be pruned at all).
   * KEYS: holds, hold expiries. ARGV: HSCAN cursor, page size.
   * Returns {now ms, next cursor, then per hold: id, hold JSON, expiry ms or false}.
   */
  mgListHolds: {
    numberOfKeys: 2,
    lua:
      PRELUDE +
      `
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local out = {fmt(now_ms()), page[1]}
local fields = page[2]
for i = 1, #fields, 2 do
  out[#out + 1] = fields[i]
  out[#out + 1] = fields[i + 1]
  out[#out + 1] = redis.call('ZSCORE', KEYS[2], fields[i]) or false
end
return out
`,
  },

  /**
   * The audit's duplicate-charge pass over one chunk of an account's ledger: each charge's hold
   * id (its `holdId`, kept only when it is not the entry's id) and its entry id (the request or
   * job id) go into scratch sets; an id already there is counted in a scratch hash (hold ids
   * and entry ids apart). All live under the account's hash tag and expire on their own if the
   * audit stops half-way. The pass stays in Redis, so the auditing process never holds a
   * ledger's ids.
   * KEYS: ledger, hold ids seen, hold ids repeated, entry ids seen, entry ids repeated.
   * ARGV: start position, chunk size, scratch TTL ms. Returns how many entries the chunk had.
   */
  mgAuditCharges: {
    numberOfKeys: 5,
    lua: `
local start = tonumber(ARGV[1])
local rows = redis.call('LRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
for i = 1, #rows do
  local e = cjson.decode(rows[i])
  if not (type(e.units) == 'table' and e.units.kind == 'credit') then
    local hold = e.id
    if type(e.holdId) == 'string' then hold = e.holdId end
    if redis.call('SADD', KEYS[2], hold) == 0 then redis.call('HINCRBY', KEYS[3], hold, 1) end
    if redis.call('SADD', KEYS[4], e.id) == 0 then redis.call('HINCRBY', KEYS[5], e.id, 1) end
  end
end
if #rows > 0 then
  for k = 2, 5 do
    if redis.call('EXISTS', KEYS[k]) == 1 then redis.call('PEXPIRE', KEYS[k], ARGV[3]) end
  end
end
return #rows
`,
  },

  /** KEYS: holds, hold expiries, held sums. Returns the number of open holds. */
  mgOpenHolds: {
    numberOfKeys: 3,
    lua:
      PRELUDE +
      HOLDS +
      `
prune(KEYS[1], KEYS[2], KEYS[3], now_ms())
return redis.call('HLEN', KEYS[1])
`,
  },

  /**
   * Top-up: adds to the balance and appends its ledger entry (every wallet change is one), in
   * one step, dated by the Redis clock.
   * KEYS: balance, ledger. ARGV: amount, entry JSON without "at" (an object, ends with '}').
   * Returns the new balance as a string (exact).
   */
  mgTopUp: {
    numberOfKeys: 2,
    lua: `
redis.call('INCRBY', KEYS[1], ARGV[1])
local t = redis.call('TIME')
local at = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('RPUSH', KEYS[2], string.sub(ARGV[2], 1, -2) .. ',"at":' .. at .. '}')
-- GET, not tostring(b): Lua would print a balance past 1e14 in exponent notation.
return redis.call('GET', KEYS[1])
`,
  },

  /**
   * Create-if-absent, crediting the opening balance in the same step, as a ledger entry (a
   * credit under the opening-balance credit id, so an account gets one at most, also when its
   * record was lost and it is created again).
   * KEYS: account record, balance, ledger, opening-balance credit marker.
   * ARGV: id, grants JSON, createdAt, initial balance, opening entry JSON.
   */
  mgAccountCreate: {
    numberOfKeys: 4,
    lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'grants', ARGV[2], 'createdAt', ARGV[3])
if ARGV[4] ~= '0' and redis.call('SET', KEYS[4], '1', 'NX') then
  redis.call('INCRBY', KEYS[2], ARGV[4])
  redis.call('RPUSH', KEYS[3], ARGV[5])
end
return 1
`,
  },

  /**
   * The upgrade of one account's books written before every wallet change was a ledger entry
   * (see ledger-upgrade.ts): appends the opening-balance credit the gateway computed from a
   * balance and a ledger length it read, only if both are still what it read, and marks the
   * account upgraded. Returns 1 when the account is upgraded (now or before), 0 when its books
   * moved meanwhile (read again).
   * KEYS: balance, ledger, upgrade marker, opening-balance credit marker.
   * ARGV: balance read, ledger length read, opening entry JSON ('' when none is needed).
   */
  mgLedgerUpgrade: {
    numberOfKeys: 4,
    lua: `
if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] or redis.call('LLEN', KEYS[2]) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] ~= '' and redis.call('SET', KEYS[4], '1', 'NX') then redis.call('RPUSH', KEYS[2], ARGV[3]) end
redis.call('SET', KEYS[3], '1')
return 1
`,
  },

  /** KEYS: account record. ARGV: grants JSON. */
  mgAccountSetGrants: {
    numberOfKeys: 1,
    lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'grants', ARGV[1])
return 1
`,
  },

  /** Sets one field of an existing account record. KEYS: account record. ARGV: field, value. Returns 1 when set. */
  mgAccountSetField: {
    numberOfKeys: 1,
    lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`,
  },

  /** KEYS: key record (by digest). ARGV: id, record JSON, disabled ('0' | '1'). */
  mgKeyInsert: {
    numberOfKeys: 1,
    lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'rec', ARGV[2], 'disabled', ARGV[3])
return 1
`,
  },

  /** KEYS: key record (by digest). ARGV: id the record must have, disabled ('0' | '1'). */
  mgKeySetDisabled: {
    numberOfKeys: 1,
    lua: `
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'disabled', ARGV[2])
return 1
`,
  },

  /**
   * Compare-and-set of a key record's JSON. KEYS: key record (by digest).
   * ARGV: id the record must have, the record JSON it must hold, the new JSON. Returns 1 when set.
   */
  mgKeyReplace: {
    numberOfKeys: 1,
    lua: `
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'rec') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'rec', ARGV[3])
return 1
`,
  },

  /**
   * Deletes a key record only as it was read: the id, the record JSON and the disabled flag
   * (a write to it since, a cap or a disable, makes a rotation start again rather than lose
   * it). KEYS: key record (by digest). ARGV: id, record JSON, disabled ('0' | '1'). Returns 1
   * when deleted.
   */
  mgKeyDeleteIfSame: {
    numberOfKeys: 1,
    lua: `
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'rec') ~= ARGV[2] then return 0 end
local disabled = redis.call('HGET', KEYS[1], 'disabled')
if not disabled then disabled = '0' end
if disabled ~= ARGV[3] then return 0 end
return redis.call('DEL', KEYS[1])
`,
  },

  /** Deletes a key record if it belongs to the id. KEYS: key record (by digest). ARGV: id. */
  mgKeyDelete: {
    numberOfKeys: 1,
    lua: `
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`,
  },

  /**
   * Credit (an operator's top-up or adjustment), once per credit id: changes the balance and
   * appends the ledger entry. The marker has no TTL: credits are rare and must never repeat.
   * KEYS: balance, ledger, credit marker. ARGV: amount (may be negative), full entry JSON.
   * Returns {1, balance} or {0, balance}.
   */
  mgCredit: {
    numberOfKeys: 3,
    lua: `
if redis.call('SET', KEYS[3], '1', 'NX') == false then
  return {0, redis.call('GET', KEYS[1]) or '0'}
end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
-- GET, not tostring of INCRBY's reply: Lua would print a balance past 1e14 in exponent notation.
return {1, redis.call('GET', KEYS[1])}
`,
  },

  /** Compare-and-set. KEYS: a string key. ARGV: the value it must hold, the new value. */
  mgSetIfEquals: {
    numberOfKeys: 1,
    lua: `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end
return 0
`,
  },

  /** Compare-and-delete. KEYS: a string key. ARGV: the value it must hold. */
  mgDelIfEquals: {
    numberOfKeys: 1,
    lua: `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
  },

  /**
   * Exact sliding window, counting only under the limit.
   * KEYS: bucket (zset of hit -> ms). ARGV: limit, windowMs, unique member.
   * Returns {allowed (0|1), remaining, resetMs}.
   */
  mgHit: batchable(1, [PRELUDE, WINDOW], `
local allowed, remaining, reset = window_hit(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], now_ms())
return {allowed, remaining, reset}
`),

  /**
   * Take a slot if fewer than cap unexpired leases; re-acquiring a held lease extends it.
   * KEYS: pool (zset of lease -> expiry ms). ARGV: cap, leaseId, ttlMs. Returns 0 | 1.
   */
  mgLeaseAcquire: batchable(1, [PRELUDE, EXPIRE_WITH_LAST], `
local t = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(t))
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], fmt(t + tonumber(ARGV[3])), ARGV[2])
expire_with_last(KEYS[1])
return 1
`),

  /** Gives a slot back. KEYS: pool. ARGV: leaseId. Returns 1 when the lease was held. */
  mgLeaseRelease: batchable(1, [], `
return redis.call('ZREM', KEYS[1], ARGV[1])
`),

  /** KEYS: pool. ARGV: leaseId, ttlMs. Returns 0 when the lease is not live. */
  mgLeaseRenew: {
    numberOfKeys: 1,
    lua:
      PRELUDE +
      EXPIRE_WITH_LAST +
      `
local t = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(t))
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], fmt(t + tonumber(ARGV[2])), ARGV[1])
expire_with_last(KEYS[1])
return 1
`,
  },

  /** KEYS: pool. Returns the number of unexpired leases. */
  mgLeaseCount: {
    numberOfKeys: 1,
    lua:
      PRELUDE +
      `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now_ms()))
return redis.call('ZCARD', KEYS[1])
`,
  },

  /**
   * Create (or replace) a job. KEYS: job hash. ARGV: ttlMs, then field, JSON value pairs.
   * Returns when the job disappears (unix ms, as a string).
   */
  mgJobCreate: {
    numberOfKeys: 1,
    lua:
      PRELUDE +
      `
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
local ttl = tonumber(ARGV[1])
redis.call('PEXPIRE', KEYS[1], fmt(ttl))
return fmt(now_ms() + ttl)
`,
  },

  /**
   * Compare-and-set on the status and the claim. KEYS: job hash.
   * ARGV: n (-1 = any status), n JSON statuses, then m, m field, JSON value pairs the job must
   * hold (its claim), then the field, JSON value pairs to set.
   * Returns nil, or {gone-at ms, flat field/value array of the updated job}.
   */
  mgJobUpdate: {
    numberOfKeys: 1,
    lua:
      PRELUDE +
      `
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local n = tonumber(ARGV[1])
local i = 2
if n >= 0 then
  local status = redis.call('HGET', KEYS[1], 'status')
  local ok = false
  for j = 2, n + 1 do
    if ARGV[j] == status then ok = true end
  end
  if not ok then return false end
  i = n + 2
end
local m = tonumber(ARGV[i])
for j = i + 1, i + 2 * m, 2 do
  if redis.call('HGET', KEYS[1], ARGV[j]) ~= ARGV[j + 1] then return false end
end
i = i + 2 * m + 1
if #ARGV >= i then redis.call('HSET', KEYS[1], unpack(ARGV, i)) end
local pttl = redis.call('PTTL', KEYS[1])
return {fmt(now_ms() + pttl), redis.call('HGETALL', KEYS[1])}
`,
  },

  /**
   * Compare-and-delete. KEYS: job hash. ARGV: n (-1 = any status), n JSON statuses.
   * Returns nil, or {accountId JSON, object JSON} of the deleted job (to drop it from its indexes).
   */
  mgJobDelete: {
    numberOfKeys: 1,
    lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local n = tonumber(ARGV[1])
if n >= 0 then
  local status = redis.call('HGET', KEYS[1], 'status')
  local ok = false
  for j = 2, n + 1 do
    if ARGV[j] == status then ok = true end
  end
  if not ok then return false end
end
local found = redis.call('HMGET', KEYS[1], 'accountId', 'object')
redis.call('DEL', KEYS[1])
return {found[1] or 'null', found[2] or 'null'}
`,
  },

  /** KEYS: job index (zset of id -> gone-at ms). Drops gone jobs, returns the rest. */
  mgJobIndex: {
    numberOfKeys: 1,
    lua:
      PRELUDE +
      `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now_ms()))
return redis.call('ZRANGE', KEYS[1], 0, -1)
`,
  },

  /** KEYS: documents hash, documents version. ARGV: id, JSON. Returns the new version. */
  mgDocPut: {
    numberOfKeys: 2,
    lua:
      PRELUDE +
      DOC_VERSION +
      `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return bump(KEYS[2])
`,
  },

  /** KEYS: documents hash, documents version. ARGV: id. Returns 1 when deleted. */
  mgDocDelete: {
    numberOfKeys: 2,
    lua:
      PRELUDE +
      DOC_VERSION +
      `
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
bump(KEYS[2])
return 1
`,
  },

  /**
   * Tokens per minute: take-if-it-fits over an exact sliding window of tokens. The takes of the
   * window are a zset (take id -> ms) and a hash (take id -> tokens, "#" -> their sum), under
   * one hash tag; takes that left the window are dropped (and their tokens subtracted) first.
   * KEYS: takes zset, tokens hash. ARGV: take id, tokens, limit, window ms.
   * Returns {allowed (0 | 1), remaining, reset ms} (reset -1: these tokens never fit).
   */
  mgTokensTake: {
    numberOfKeys: 2,
    lua:
      PRELUDE +
      `
local z, h = KEYS[1], KEYS[2]
local id, n, limit, w = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = now_ms()
local used = num(redis.call('HGET', h, '#'))
local gone = redis.call('ZRANGEBYSCORE', z, '-inf', fmt(t - w))
if #gone > 0 then
  for i = 1, #gone do
    used = used - num(redis.call('HGET', h, gone[i]))
    redis.call('HDEL', h, gone[i])
  end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', fmt(t - w))
  redis.call('HSET', h, '#', fmt(used))
end
local remaining = limit - used
if remaining < 0 then remaining = 0 end
local held = redis.call('HEXISTS', h, id) == 1
if held or used + n <= limit then
  if not held then
    redis.call('ZADD', z, fmt(t), id)
    redis.call('HSET', h, id, fmt(n), '#', fmt(used + n))
    used = used + n
    -- The newest take leaves the window within w, so an idle window disappears.
    redis.call('PEXPIRE', z, fmt(w))
    redis.call('PEXPIRE', h, fmt(w))
  end
  remaining = limit - used
  if remaining < 0 then remaining = 0 end
  local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  local reset = 0
  if first[2] then reset = tonumber(first[2]) + w - t end
  if reset < 0 then reset = 0 end
  return {1, fmt(remaining), fmt(reset)}
end
if n > limit then return {0, fmt(remaining), '-1'} end
-- Walk from the oldest take until enough has left for these tokens to fit.
local free = limit - used
local rows = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
for i = 1, #rows, 2 do
  free = free + num(redis.call('HGET', h, rows[i]))
  if free >= n then
    local reset = tonumber(rows[i + 1]) + w - t
    if reset < 1 then reset = 1 end
    return {0, fmt(remaining), fmt(reset)}
  end
end
return {0, fmt(remaining), '-1'}
`,
  },

  /**
   * Corrects a take to the tokens its call used (the sum moves with it). A take no longer
   * held changes nothing. KEYS: takes zset, tokens hash. ARGV: take id, tokens. Returns 1 when corrected.
   */
  mgTokensSet: {
    numberOfKeys: 2,
    lua:
      PRELUDE +
      `
local old = redis.call('HGET', KEYS[2], ARGV[1])
if not old then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[2], '#', fmt(tonumber(ARGV[2]) - tonumber(old)))
return 1
`,
  },

  /**
   * Idempotency-Key create-if-absent. KEYS: record. ARGV: in-flight record JSON, lock TTL ms.
   * Returns nil when the record was created ("started"), else the existing record.
   */
  mgIdemBegin: {
    numberOfKeys: 1,
    lua: `
local cur = redis.call('GET', KEYS[1])
if cur then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
`,
  },

  /**
   * A batch's compare-and-set on its revision.
   * KEYS: the batch's hash. ARGV: expected rev, new rev, new data. Returns 1 when written.
   */
  mgBatchSwap: {
    numberOfKeys: 1,
    lua: `
local expected = ARGV[1]
local rev = ARGV[2]
local data = ARGV[3]
if redis.call('HGET', KEYS[1], 'rev') ~= expected then return 0 end
redis.call('HSET', KEYS[1], 'rev', rev, 'data', data)
return 1
`,
  },

  /**
   * A finished line of a batch, once per custom id, only while the batch exists.
   * KEYS: the batch's hash, its lines' hash. ARGV: custom id, the line. Returns 1 when added.
   */
  mgBatchLine: {
    numberOfKeys: 2,
    lua: `
local customId = ARGV[1]
local line = ARGV[2]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HSETNX', KEYS[2], customId, line)
`,
  },
} satisfies Record<string, ScriptDef>;

export type ScriptName = keyof typeof SCRIPTS;

/**
 * The per-call scripts, which can also run inside mgBatch. Their place in this list is the
 * code mgBatch knows them by.
 */
export const BATCHABLE = ['mgHit', 'mgLeaseAcquire', 'mgLeaseRelease', 'mgPlaceHold', 'mgHitPlaceHold', 'mgSettle', 'mgRelease'] as const;
export type BatchableName = (typeof BATCHABLE)[number];

/**
 * mgBatch: several per-call scripts in one EVALSHA, run one after another, each answered as if
 * it had been sent alone at the instant the batch runs. Redis then parses, looks up and starts
 * one script where it would have started dozens, and the gateway builds and parses one
 * command. Since the clock stands still for the run, the operations also share work: one
 * clock reading, one prune of an account's expired holds, one trim and read of a window
 * (every later hit of it is one ZADD), one update of the hold keys' expiry at the end. The
 * caller puts in one batch only operations whose keys share one hash tag, so the batch, like
 * every script, touches one hash slot.
 * KEYS: every operation's keys, in order.
 * ARGV: for each operation, its code (1-based place in BATCHABLE), the number of its
 *       arguments, then its arguments.
 * Returns one reply per operation, in order: the script's own reply, or an error reply when
 * that script failed (the operations before and after it still run, as they would have).
 */
export const BATCH_LUA = (() => {
  const defs = BATCHABLE.map((name) => SCRIPTS[name] as BatchableDef);
  // Each helper once, in an order where every helper comes after the ones it calls (each
  // script lists its helpers in that order, and a helper's first appearance keeps it).
  const helpers: string[] = [];
  for (const d of defs) for (const h of d.helpers) if (!helpers.includes(h)) helpers.push(h);
  const functions = defs.map((d, i) => `F[${i + 1}] = function(KEYS, ARGV)\n${d.body}\nend\n`).join('');
  return `${helpers.join('')}
local F = {}
local NK = {${defs.map((d) => d.numberOfKeys).join(', ')}}
${functions}
-- The operations, read and checked before any runs: a malformed batch fails whole, before it
-- writes anything.
local ops = {}
local k, a, n = 0, 1, #ARGV
while a <= n do
  local code, nargs = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  if not (code and F[code] and nargs and nargs >= 0 and a + 1 + nargs <= n) then
    return redis.error_reply('mgBatch: malformed operation at argument ' .. a)
  end
  local keys, argv = {}, {}
  for j = 1, NK[code] do keys[j] = KEYS[k + j] end
  for j = 1, nargs do argv[j] = ARGV[a + 1 + j] end
  ops[#ops + 1] = {code, keys, argv}
  k = k + NK[code]
  a = a + 2 + nargs
end
if k ~= #KEYS then return redis.error_reply('mgBatch: the operations take ' .. k .. ' keys, got ' .. #KEYS) end
local out = {}
IN_BATCH = true
for i = 1, #ops do
  local ok, r = pcall(F[ops[i][1]], ops[i][2], ops[i][3])
  if not ok then
    -- redis.call raises its error as a table {err = message}; a Lua error as a string.
    if type(r) == 'table' and r.err then r = redis.error_reply(r.err) else r = redis.error_reply(tostring(r)) end
  elseif r == nil then
    r = false
  end
  out[i] = r
end
-- The expiries every operation left due, once each. Each key was written by an operation that
-- succeeded, and PEXPIREAT takes a key of any type, so this does not fail; if it did, the
-- operations would stand as answered, and hold keys it missed would live until the next hold
-- of their account sets their expiry.
IN_BATCH = false
pcall(expire_due)
return out
`;
})();

/** Runs one script: `keys` must have exactly the script's number of keys. */
export type RunScript = (keys: readonly string[], args: readonly (string | number)[]) => Promise<unknown>;

export type Scripts = Record<ScriptName, RunScript> & {
  /** mgBatch: `args` as BATCH_LUA describes them. */
  mgBatch: (keys: readonly string[], args: readonly (string | number)[]) => Promise<unknown>;
};

/**
 * Registers every script on `client` with `defineCommand` (names start with `mg`, so they do
 * not collide with an application's own commands) and returns typed runners.
 */
export function defineScripts(client: RedisClient): Scripts {
  const commands = client as unknown as Record<string, (...args: (string | number)[]) => Promise<unknown>>;
  const out = {} as Scripts;
  for (const [name, def] of Object.entries(SCRIPTS) as [ScriptName, ScriptDef][]) {
    client.defineCommand(name, { lua: def.lua, numberOfKeys: def.numberOfKeys });
    out[name] = (keys, args) => {
      if (keys.length !== def.numberOfKeys) {
        return Promise.reject(new Error(`${name} takes ${def.numberOfKeys} keys, got ${keys.length}`));
      }
      const command = commands[name];
      if (!command) return Promise.reject(new Error(`script ${name} is not defined on the client`));
      return command.call(client, ...keys, ...args);
    };
  }
  // No numberOfKeys: the number of keys is the call's first argument.
  client.defineCommand('mgBatch', { lua: BATCH_LUA });
  out.mgBatch = (keys, args) => {
    const command = commands.mgBatch;
    if (!command) return Promise.reject(new Error('script mgBatch is not defined on the client'));
    return command.call(client, keys.length, ...keys, ...args);
  };
  return out;
}
