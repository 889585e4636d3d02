/**
 * The PostgreSQL schema, as numbered migrations, each a function of the (validated, quoted)
 * schema name. `migrate` applies the missing ones at start inside one transaction that holds
 * an advisory lock for the schema, so several instances starting at once apply each exactly
 * once and none reads a half-made schema.
 *
 * The operations that must be atomic are plpgsql functions, one round trip each:
 * - Money (placeHold, settle, release) first locks the account's wallet row (FOR UPDATE), so
 *   one account's holds and settles run one at a time and every check reads what it writes.
 *   Since migration 5 an instance sends them in batches (mg_account_batch): the operations of
 *   one account that arrived while its previous call ran, in one transaction, in order. Since
 *   migration 6 the batch reads what it needs in a few statements, decides each operation in
 *   memory, and writes once per table.
 *   Holding that lock also orders the account's ledger seqs by commit, so paging by seq
 *   never skips an entry.
 * - Rate windows and lease pools take a transaction-scoped advisory lock on the bucket or
 *   pool (there is no row to lock before the first hit).
 * - Time is the database clock (`mg_now`, read after the lock is taken), never an instance
 *   clock, so instances on different machines agree.
 * - Settles, top-ups, accounts, keys and idempotency records commit synchronously: once a
 *   call returns, they survive a PostgreSQL crash. Rate-window hits, leases, holds and
 *   releases commit asynchronously (`mg_async_commit`): their locks are held only while they
 *   run, not through a disk flush, which is what bounds one account's calls per second. A
 *   PostgreSQL crash may forget the last fraction of a second of them: a hit or lease less
 *   (a limit briefly loose), a hold less (it stops counting early; its call is still billed
 *   in full by its settle), a release less (the hold expires with its TTL).
 * Money is BIGINT nano-USD throughout; `sum` (numeric) is cast back to bigint.
 */
import type postgres from 'postgres';
import { OPENING_BALANCE_ID, OPENING_BALANCE_REASON } from '../wallet-entries.js';

/** Milliseconds a closed hold id is remembered (as in every driver). */
export const CLOSED_TTL_MS = 24 * 60 * 60 * 1000;

export const MIGRATIONS: ReadonlyArray<(s: string, lockPrefix: string) => string> = [
  (s, lockPrefix) => `
CREATE TABLE ${s}.accounts (
  id text PRIMARY KEY,
  grants jsonb NOT NULL,
  created_at bigint NOT NULL
);

-- A wallet is apart from its account record: a top-up may come first, as in every driver.
CREATE TABLE ${s}.wallets (
  account_id text PRIMARY KEY,
  balance bigint NOT NULL
);

CREATE TABLE ${s}.api_keys (
  id text PRIMARY KEY,
  digest text NOT NULL UNIQUE,
  prefix text NOT NULL,
  account_id text NOT NULL,
  kind text NOT NULL,
  model text,
  label text,
  monthly_cap bigint,
  disabled boolean NOT NULL,
  created_at bigint NOT NULL
);
CREATE INDEX api_keys_account ON ${s}.api_keys (account_id);

-- Open holds. A row whose expires_at has passed counts for nothing; the account's next
-- money operation (or the sweep) deletes it.
CREATE TABLE ${s}.holds (
  account_id text NOT NULL,
  hold_id text NOT NULL,
  key_id text NOT NULL,
  amount bigint NOT NULL CHECK (amount >= 0),
  month text NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (account_id, hold_id)
);
CREATE INDEX holds_expiry ON ${s}.holds (expires_at);

-- Hold ids closed by a settle or a release, kept a day, so a replay changes nothing.
CREATE TABLE ${s}.closed_holds (
  account_id text NOT NULL,
  hold_id text NOT NULL,
  closed_at bigint NOT NULL,
  PRIMARY KEY (account_id, hold_id)
);
CREATE INDEX closed_holds_age ON ${s}.closed_holds (closed_at);

CREATE TABLE ${s}.key_spend (
  account_id text NOT NULL,
  key_id text NOT NULL,
  month text NOT NULL,
  amount bigint NOT NULL,
  PRIMARY KEY (account_id, key_id, month)
);

CREATE TABLE ${s}.ledger (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id text NOT NULL,
  hold_id text NOT NULL,
  id text NOT NULL,
  key_id text NOT NULL,
  model text NOT NULL,
  units jsonb NOT NULL,
  cost bigint NOT NULL,
  held bigint NOT NULL,
  exceeded_hold boolean NOT NULL,
  measured text CHECK (measured IN ('usage', 'tokenizer', 'estimate')),
  upstream text,
  at bigint NOT NULL,
  recorded_at bigint NOT NULL
);
-- One entry per hold id and account, for good: a settle replayed after the closed marker
-- was swept still changes nothing.
CREATE UNIQUE INDEX ledger_hold ON ${s}.ledger (account_id, hold_id);
CREATE INDEX ledger_account ON ${s}.ledger (account_id, seq);
CREATE INDEX ledger_key ON ${s}.ledger (account_id, key_id, seq);
CREATE FUNCTION ${s}.mg_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the ledger is append-only';
END $$;
CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON ${s}.ledger
  FOR EACH ROW EXECUTE FUNCTION ${s}.mg_append_only();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ${s}.ledger
  FOR EACH STATEMENT EXECUTE FUNCTION ${s}.mg_append_only();

-- A rate window: how many hits it counts (kept beside them, so a hit never counts rows) and
-- when its newest hit leaves it; and one row per counted hit.
CREATE TABLE ${s}.rate_windows (
  bucket text PRIMARY KEY,
  hits integer NOT NULL,
  until bigint NOT NULL
);
CREATE INDEX rate_windows_until ON ${s}.rate_windows (until);
CREATE TABLE ${s}.rate_hits (
  bucket text NOT NULL,
  at bigint NOT NULL
);
CREATE INDEX rate_hits_bucket ON ${s}.rate_hits (bucket, at);

CREATE TABLE ${s}.leases (
  pool text NOT NULL,
  lease_id text NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (pool, lease_id)
);
CREATE INDEX leases_expiry ON ${s}.leases (expires_at);

CREATE TABLE ${s}.jobs (
  id text PRIMARY KEY,
  status text NOT NULL,
  gone_at bigint NOT NULL,
  data jsonb NOT NULL
);
CREATE INDEX jobs_unfinished ON ${s}.jobs (gone_at) WHERE status NOT IN ('completed', 'failed');
CREATE INDEX jobs_gone ON ${s}.jobs (gone_at);

CREATE TABLE ${s}.brands (
  account_id text NOT NULL,
  id text NOT NULL,
  data jsonb NOT NULL,
  created_at bigint NOT NULL,
  PRIMARY KEY (account_id, id)
);

CREATE TABLE ${s}.documents (
  account_id text NOT NULL,
  id text NOT NULL,
  data jsonb NOT NULL,
  created_at bigint NOT NULL,
  PRIMARY KEY (account_id, id)
);

CREATE TABLE ${s}.document_versions (
  account_id text PRIMARY KEY,
  version bigint NOT NULL
);

CREATE TABLE ${s}.idempotency (
  scope text PRIMARY KEY,
  fingerprint text NOT NULL,
  response jsonb,
  expires_at bigint NOT NULL
);
CREATE INDEX idempotency_expiry ON ${s}.idempotency (expires_at);

-- Makes the calling transaction commit without waiting for its WAL to reach disk (see the
-- top of migrations.ts for which operations may, and why).
CREATE FUNCTION ${s}.mg_async_commit() RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT set_config('synchronous_commit', 'off', true)
$$;

-- The database clock in unix ms: the one clock every instance reads.
CREATE FUNCTION ${s}.mg_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- Locks the account's wallet row (creating it at zero) and returns the balance.
CREATE FUNCTION ${s}.mg_lock_wallet(p_account text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_balance bigint;
BEGIN
  SELECT balance INTO v_balance FROM ${s}.wallets WHERE account_id = p_account FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO ${s}.wallets (account_id, balance) VALUES (p_account, 0) ON CONFLICT DO NOTHING;
    SELECT balance INTO v_balance FROM ${s}.wallets WHERE account_id = p_account FOR UPDATE;
  END IF;
  RETURN v_balance;
END $$;

-- Hold-if-affordable: balance - held >= amount, and, with a cap, spend(month) + held(key) +
-- amount <= cap. An open hold id placed again is a no-op.
CREATE FUNCTION ${s}.mg_place_hold(
  p_account text, p_hold text, p_key text, p_amount bigint, p_cap bigint, p_month text, p_ttl bigint,
  OUT o_ok boolean, OUT o_source text, OUT o_available bigint
) LANGUAGE plpgsql AS $$
DECLARE v_balance bigint; v_t bigint; v_free bigint; v_room bigint;
BEGIN
  PERFORM ${s}.mg_async_commit();
  v_balance := ${s}.mg_lock_wallet(p_account);
  v_t := ${s}.mg_now();
  DELETE FROM ${s}.holds WHERE account_id = p_account AND expires_at <= v_t;
  o_ok := true;
  IF EXISTS (SELECT 1 FROM ${s}.holds WHERE account_id = p_account AND hold_id = p_hold) THEN RETURN; END IF;
  v_free := v_balance - (SELECT coalesce(sum(amount), 0) FROM ${s}.holds WHERE account_id = p_account)::bigint;
  IF v_free < p_amount THEN
    o_ok := false; o_source := 'wallet'; o_available := greatest(v_free, 0);
    RETURN;
  END IF;
  IF p_cap IS NOT NULL THEN
    v_room := p_cap
      - coalesce((SELECT amount FROM ${s}.key_spend WHERE account_id = p_account AND key_id = p_key AND month = p_month), 0)
      - (SELECT coalesce(sum(amount), 0) FROM ${s}.holds WHERE account_id = p_account AND key_id = p_key)::bigint;
    IF v_room < p_amount THEN
      o_ok := false; o_source := 'key_monthly_cap'; o_available := greatest(v_room, 0);
      RETURN;
    END IF;
  END IF;
  INSERT INTO ${s}.holds (account_id, hold_id, key_id, amount, month, expires_at)
    VALUES (p_account, p_hold, p_key, p_amount, p_month, v_t + p_ttl);
END $$;

-- Settle, once per (account, hold id): debits the full cost (even past the hold, even when
-- the hold expired: the output was delivered), adds it to the key's spend, appends the entry.
CREATE FUNCTION ${s}.mg_settle(
  p_account text, p_hold text, p_month text, p_cost bigint, p_id text, p_key text, p_model text,
  p_units jsonb, p_measured text, p_upstream text, p_at bigint,
  OUT o_settled boolean, OUT o_charged bigint, OUT o_held bigint
) LANGUAGE plpgsql AS $$
DECLARE v_t bigint; v_amount bigint; v_hold_month text; v_held bigint := 0; v_month text := p_month;
BEGIN
  PERFORM ${s}.mg_lock_wallet(p_account);
  v_t := ${s}.mg_now();
  DELETE FROM ${s}.holds WHERE account_id = p_account AND expires_at <= v_t;
  o_settled := false;
  o_charged := 0;
  o_held := 0;
  INSERT INTO ${s}.closed_holds (account_id, hold_id, closed_at) VALUES (p_account, p_hold, v_t) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN RETURN; END IF;
  IF EXISTS (SELECT 1 FROM ${s}.ledger WHERE account_id = p_account AND hold_id = p_hold) THEN RETURN; END IF;
  DELETE FROM ${s}.holds WHERE account_id = p_account AND hold_id = p_hold
    RETURNING amount, month INTO v_amount, v_hold_month;
  IF FOUND THEN v_held := v_amount; v_month := v_hold_month; END IF;
  UPDATE ${s}.wallets SET balance = balance - p_cost WHERE account_id = p_account;
  INSERT INTO ${s}.key_spend AS ks (account_id, key_id, month, amount) VALUES (p_account, p_key, v_month, p_cost)
    ON CONFLICT (account_id, key_id, month) DO UPDATE SET amount = ks.amount + excluded.amount;
  INSERT INTO ${s}.ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
    VALUES (p_account, p_hold, p_id, p_key, p_model, p_units, p_cost, v_held, p_cost > v_held, p_measured, p_upstream, p_at, v_t);
  o_settled := true;
  o_charged := p_cost;
  o_held := v_held;
END $$;

-- Release: closes the hold id and drops the hold; true when an open (unexpired) one was
-- dropped. It takes the wallet lock like settle, so the two never deadlock on one hold.
CREATE FUNCTION ${s}.mg_release(p_account text, p_hold text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE v_t bigint; v_expires bigint;
BEGIN
  PERFORM ${s}.mg_async_commit();
  PERFORM ${s}.mg_lock_wallet(p_account);
  v_t := ${s}.mg_now();
  INSERT INTO ${s}.closed_holds (account_id, hold_id, closed_at) VALUES (p_account, p_hold, v_t) ON CONFLICT DO NOTHING;
  DELETE FROM ${s}.holds WHERE account_id = p_account AND hold_id = p_hold RETURNING expires_at INTO v_expires;
  RETURN FOUND AND v_expires > v_t;
END $$;

CREATE FUNCTION ${s}.mg_create_account(p_id text, p_grants jsonb, p_created bigint, p_initial bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ${s}.accounts (id, grants, created_at) VALUES (p_id, p_grants, p_created) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN RETURN false; END IF;
  INSERT INTO ${s}.wallets AS w (account_id, balance) VALUES (p_id, p_initial)
    ON CONFLICT (account_id) DO UPDATE SET balance = w.balance + excluded.balance;
  RETURN true;
END $$;

-- Exact sliding window: counts the hit only if fewer than p_limit hits are in the window.
-- The count is kept in rate_windows and moved with every insert and trim, under the lock, so
-- a hit costs O(log n) however high the limit.
CREATE FUNCTION ${s}.mg_hit(
  p_bucket text, p_limit integer, p_window bigint,
  OUT o_allowed boolean, OUT o_remaining integer, OUT o_reset bigint
) LANGUAGE plpgsql AS $$
DECLARE v_t bigint; v_left integer; v_n integer; v_oldest bigint;
BEGIN
  PERFORM ${s}.mg_async_commit();
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:rl:' || p_bucket, 0));
  v_t := ${s}.mg_now();
  DELETE FROM ${s}.rate_hits WHERE bucket = p_bucket AND at <= v_t - p_window;
  GET DIAGNOSTICS v_left = ROW_COUNT;
  SELECT hits INTO v_n FROM ${s}.rate_windows WHERE bucket = p_bucket;
  v_n := coalesce(v_n, 0) - v_left;
  o_allowed := v_n < p_limit;
  IF o_allowed THEN
    INSERT INTO ${s}.rate_hits (bucket, at) VALUES (p_bucket, v_t);
    v_n := v_n + 1;
  END IF;
  INSERT INTO ${s}.rate_windows AS w (bucket, hits, until)
    VALUES (p_bucket, v_n, CASE WHEN o_allowed THEN v_t + p_window ELSE 0 END)
    ON CONFLICT (bucket) DO UPDATE SET hits = excluded.hits, until = greatest(w.until, excluded.until);
  SELECT min(at) INTO v_oldest FROM ${s}.rate_hits WHERE bucket = p_bucket;
  o_remaining := CASE WHEN o_allowed THEN p_limit - v_n ELSE 0 END;
  o_reset := CASE WHEN v_oldest IS NULL THEN 0 ELSE greatest(0, v_oldest + p_window - v_t) END;
END $$;

-- Takes a slot if fewer than p_cap unexpired leases are held; re-acquiring one extends it.
CREATE FUNCTION ${s}.mg_acquire_lease(p_pool text, p_cap integer, p_lease text, p_ttl bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE v_t bigint;
BEGIN
  PERFORM ${s}.mg_async_commit();
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:ls:' || p_pool, 0));
  v_t := ${s}.mg_now();
  DELETE FROM ${s}.leases WHERE pool = p_pool AND expires_at <= v_t;
  IF NOT EXISTS (SELECT 1 FROM ${s}.leases WHERE pool = p_pool AND lease_id = p_lease)
     AND (SELECT count(*) FROM ${s}.leases WHERE pool = p_pool) >= p_cap THEN
    RETURN false;
  END IF;
  INSERT INTO ${s}.leases AS l (pool, lease_id, expires_at) VALUES (p_pool, p_lease, v_t + p_ttl)
    ON CONFLICT (pool, lease_id) DO UPDATE SET expires_at = excluded.expires_at;
  RETURN true;
END $$;

-- Idempotency-Key get-or-create. The loop covers a record abandoned between the insert that
-- found it and the read of it.
CREATE FUNCTION ${s}.mg_idem_begin(
  p_scope text, p_fingerprint text, p_ttl bigint,
  OUT o_state text, OUT o_fingerprint text, OUT o_response jsonb
) LANGUAGE plpgsql AS $$
DECLARE v_t bigint;
BEGIN
  LOOP
    v_t := ${s}.mg_now();
    DELETE FROM ${s}.idempotency WHERE scope = p_scope AND expires_at <= v_t;
    INSERT INTO ${s}.idempotency (scope, fingerprint, response, expires_at)
      VALUES (p_scope, p_fingerprint, NULL, v_t + p_ttl) ON CONFLICT DO NOTHING;
    IF FOUND THEN o_state := 'started'; RETURN; END IF;
    SELECT fingerprint, response INTO o_fingerprint, o_response FROM ${s}.idempotency WHERE scope = p_scope;
    IF FOUND THEN
      o_state := CASE WHEN o_response IS NULL THEN 'in_flight' ELSE 'done' END;
      RETURN;
    END IF;
  END LOOP;
END $$;

-- Housekeeping: deletes what already counts for nothing. SKIP LOCKED, so the sweep never
-- waits on (or deadlocks with) a request; what it skips, the next sweep takes.
CREATE FUNCTION ${s}.mg_sweep() RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_t bigint := ${s}.mg_now(); v_bucket text;
BEGIN
  PERFORM ${s}.mg_async_commit();
  DELETE FROM ${s}.holds WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.holds WHERE expires_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
  DELETE FROM ${s}.closed_holds WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.closed_holds WHERE closed_at <= v_t - ${CLOSED_TTL_MS} LIMIT 10000 FOR UPDATE SKIP LOCKED));
  -- A window whose newest hit has left goes with all its hits, under the window's own lock
  -- (tried, never waited for), checked again once held, so no hit is lost or miscounted.
  FOR v_bucket IN SELECT bucket FROM ${s}.rate_windows WHERE until <= v_t LIMIT 500 LOOP
    IF pg_try_advisory_xact_lock(hashtextextended('${lockPrefix}:rl:' || v_bucket, 0)) THEN
      DELETE FROM ${s}.rate_windows WHERE bucket = v_bucket AND until <= v_t;
      IF FOUND THEN DELETE FROM ${s}.rate_hits WHERE bucket = v_bucket; END IF;
    END IF;
  END LOOP;
  DELETE FROM ${s}.leases WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.leases WHERE expires_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
  DELETE FROM ${s}.jobs WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.jobs WHERE gone_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
  DELETE FROM ${s}.idempotency WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.idempotency WHERE expires_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
END $$;
`,
  // Credits (operators' top-ups and adjustments) as ledger entries, once per credit id. The
  // wallet lock comes first, as in settle, so ledger seqs stay in commit order.
  (s) => `
CREATE FUNCTION ${s}.mg_credit(
  p_account text, p_credit text, p_amount bigint, p_units jsonb, p_at bigint,
  OUT o_applied boolean, OUT o_balance bigint
) LANGUAGE plpgsql AS $$
DECLARE v_t bigint;
BEGIN
  o_balance := ${s}.mg_lock_wallet(p_account);
  v_t := ${s}.mg_now();
  o_applied := false;
  IF EXISTS (SELECT 1 FROM ${s}.ledger WHERE account_id = p_account AND hold_id = 'credit:' || p_credit) THEN RETURN; END IF;
  UPDATE ${s}.wallets SET balance = balance + p_amount WHERE account_id = p_account RETURNING balance INTO o_balance;
  INSERT INTO ${s}.ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
    VALUES (p_account, 'credit:' || p_credit, p_credit, '', '', p_units, -p_amount, 0, false, NULL, NULL, p_at, v_t);
  o_applied := true;
END $$;
`,
  // 3: an account's job listing (GET /videos) reads through this index, in its page order.
  (s) => `
CREATE INDEX jobs_account ON ${s}.jobs ((data ->> 'accountId'), (data ->> 'object'), ((data ->> 'createdAt')::bigint), id COLLATE "C");
`,
  // 4: a key's window hit and its hold in one call: one round trip and one commit per billed
  // call instead of two. The window's advisory lock is taken before the wallet row lock, and
  // nothing takes them the other way round, so the two never deadlock.
  (s) => `
CREATE FUNCTION ${s}.mg_hit_place_hold(
  p_bucket text, p_limit integer, p_window bigint,
  p_account text, p_hold text, p_key text, p_amount bigint, p_cap bigint, p_month text, p_ttl bigint,
  OUT o_allowed boolean, OUT o_remaining integer, OUT o_reset bigint,
  OUT o_ok boolean, OUT o_source text, OUT o_available bigint
) LANGUAGE plpgsql AS $$
BEGIN
  SELECT h.o_allowed, h.o_remaining, h.o_reset INTO o_allowed, o_remaining, o_reset
    FROM ${s}.mg_hit(p_bucket, p_limit, p_window) h;
  IF NOT o_allowed THEN RETURN; END IF;
  SELECT p.o_ok, p.o_source, p.o_available INTO o_ok, o_source, o_available
    FROM ${s}.mg_place_hold(p_account, p_hold, p_key, p_amount, p_cap, p_month, p_ttl) p;
END $$;
`,
  // 5: batches. An instance sends one account's holds, settles and releases (and one bucket's
  // window hits) that arrive while its previous call for that account (or bucket) runs as one
  // call: one round trip, one transaction and one commit for them all, run in arrival order
  // exactly as if sent one by one. Without this, fifty calls of one account queue in the
  // database on its wallet row and window lock, a settle holding the row through its disk
  // flush, and an account manages a few hundred calls per second.
  // Lock order stays the one mg_hit_place_hold uses: every window lock the batch needs, in
  // sorted order, then the wallet row; nothing takes them the other way round.
  // Money travels as decimal strings in the JSON, never as JSON numbers.
  (s, lockPrefix) => `
-- One bucket's window hits at time p_t, in order, under the bucket's lock, which the caller
-- has taken (before reading p_t): [[limit, window ms], ...] -> [[allowed, remaining, reset
-- ms], ...], each counted as mg_hit would count it at p_t. Hits that share one window (the
-- usual case) cost one trim, one count and one insert for them all.
CREATE FUNCTION ${s}.mg_hits_at(p_bucket text, p_hits jsonb, p_t bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_out jsonb := '[]'::jsonb;
  v_hit jsonb;
  r record;
  v_window bigint;
  v_left integer;
  v_n integer;
  v_limit integer;
  v_added integer := 0;
  v_oldest bigint;
BEGIN
  IF (SELECT count(DISTINCT e ->> 1) FROM jsonb_array_elements(p_hits) e) > 1 THEN
    FOR v_hit IN SELECT e FROM jsonb_array_elements(p_hits) e LOOP
      SELECT * INTO r FROM ${s}.mg_hit(p_bucket, (v_hit ->> 0)::integer, (v_hit ->> 1)::bigint);
      v_out := v_out || jsonb_build_array(jsonb_build_array(r.o_allowed, r.o_remaining, r.o_reset::text));
    END LOOP;
    RETURN v_out;
  END IF;
  v_window := (p_hits -> 0 ->> 1)::bigint;
  DELETE FROM ${s}.rate_hits WHERE bucket = p_bucket AND at <= p_t - v_window;
  GET DIAGNOSTICS v_left = ROW_COUNT;
  SELECT hits INTO v_n FROM ${s}.rate_windows WHERE bucket = p_bucket;
  v_n := coalesce(v_n, 0) - v_left;
  SELECT min(at) INTO v_oldest FROM ${s}.rate_hits WHERE bucket = p_bucket;
  FOR v_hit IN SELECT e FROM jsonb_array_elements(p_hits) e LOOP
    v_limit := (v_hit ->> 0)::integer;
    IF v_n < v_limit THEN
      v_n := v_n + 1;
      v_added := v_added + 1;
      v_oldest := coalesce(v_oldest, p_t);
      v_out := v_out || jsonb_build_array(jsonb_build_array(true, v_limit - v_n, greatest(0, v_oldest + v_window - p_t)::text));
    ELSE
      v_out := v_out || jsonb_build_array(jsonb_build_array(false, 0,
        (CASE WHEN v_oldest IS NULL THEN 0 ELSE greatest(0, v_oldest + v_window - p_t) END)::text));
    END IF;
  END LOOP;
  IF v_added > 0 THEN
    INSERT INTO ${s}.rate_hits (bucket, at) SELECT p_bucket, p_t FROM generate_series(1, v_added);
  END IF;
  INSERT INTO ${s}.rate_windows AS w (bucket, hits, until)
    VALUES (p_bucket, v_n, CASE WHEN v_added > 0 THEN p_t + v_window ELSE 0 END)
    ON CONFLICT (bucket) DO UPDATE SET hits = excluded.hits, until = greatest(w.until, excluded.until);
  RETURN v_out;
END $$;

-- One bucket's window hits, in order, in one call (see mg_hits_at).
CREATE FUNCTION ${s}.mg_hits(p_bucket text, p_hits jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
  PERFORM ${s}.mg_async_commit();
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:rl:' || p_bucket, 0));
  RETURN ${s}.mg_hits_at(p_bucket, p_hits, ${s}.mg_now());
END $$;

-- An account's holds ('hold', and 'hit_hold': a key's window hit, then the hold if the window
-- allowed it), settles and releases, in order, with the steps and answers of mg_place_hold,
-- mg_hit_place_hold, mg_settle and mg_release (which instances of earlier versions still
-- call one at a time). The batch reads the clock once, drops the account's expired holds and
-- sums what it holds once, counts each bucket's hits together, and writes the wallet and the
-- keys' spend once at its end; each operation keeps the running balance, held and spend.
CREATE INDEX holds_account_expiry ON ${s}.holds (account_id, expires_at);

CREATE FUNCTION ${s}.mg_account_batch(p_account text, p_ops jsonb) RETURNS jsonb LANGUAGE plpgsql
SET enable_bitmapscan = off AS $$
DECLARE
  -- Holds, hits and releases ask for an asynchronous commit; a settle in the batch makes the
  -- whole batch commit as a settle alone would.
  v_commit text := current_setting('synchronous_commit');
  v_settles boolean := false;
  v_out jsonb := '[]'::jsonb;
  v_op jsonb;
  v_i bigint;
  v_kind text;
  v_bucket text;
  v_hits jsonb;
  v_at bigint[];
  v_windows jsonb := '{}'::jsonb;
  v_t bigint;
  v_balance bigint;
  v_debit bigint := 0;
  v_held bigint;
  -- What this batch adds to each key's monthly spend: {key: {month: "amount"}}.
  v_spend jsonb := '{}'::jsonb;
  v_key text;
  v_month text;
  v_hold text;
  v_amount bigint;
  v_cap bigint;
  v_room bigint;
  v_cost bigint;
  v_hold_amount bigint;
  v_hold_month text;
  v_expires bigint;
  v_res jsonb;
  v_dropped boolean;
BEGIN
  -- Every window lock the batch needs, in sorted order, then the wallet row.
  FOR v_bucket IN
    SELECT DISTINCT e ->> 'bucket' FROM jsonb_array_elements(p_ops) e WHERE e ->> 'op' = 'hit_hold' ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:rl:' || v_bucket, 0));
  END LOOP;
  v_balance := ${s}.mg_lock_wallet(p_account);
  v_t := ${s}.mg_now();
  -- Each bucket's hits, counted together: {"<op index>": [allowed, remaining, reset], ...}.
  FOR v_bucket IN
    SELECT DISTINCT e ->> 'bucket' FROM jsonb_array_elements(p_ops) e WHERE e ->> 'op' = 'hit_hold'
  LOOP
    SELECT jsonb_agg(jsonb_build_array((e ->> 'limit')::integer, (e ->> 'window')::bigint) ORDER BY i), array_agg(i ORDER BY i)
      INTO v_hits, v_at
      FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS x(e, i) WHERE e ->> 'op' = 'hit_hold' AND e ->> 'bucket' = v_bucket;
    v_hits := ${s}.mg_hits_at(v_bucket, v_hits, v_t);
    FOR j IN 1 .. array_length(v_at, 1) LOOP
      v_windows := v_windows || jsonb_build_object(v_at[j]::text, v_hits -> (j - 1));
    END LOOP;
  END LOOP;
  DELETE FROM ${s}.holds WHERE account_id = p_account AND expires_at <= v_t;
  SELECT coalesce(sum(amount), 0)::bigint INTO v_held FROM ${s}.holds WHERE account_id = p_account;

  FOR v_op, v_i IN SELECT e, i FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS x(e, i) LOOP
    v_kind := v_op ->> 'op';
    v_hold := v_op ->> 'hold';
    v_key := v_op ->> 'key';
    v_month := v_op ->> 'month';
    IF v_kind IN ('hold', 'hit_hold') THEN
      IF v_kind = 'hit_hold' THEN
        v_res := v_windows -> v_i::text;
        v_res := jsonb_build_object('allowed', v_res -> 0, 'remaining', v_res -> 1, 'reset', v_res -> 2);
        IF NOT (v_res ->> 'allowed')::boolean THEN
          v_out := v_out || jsonb_build_array(v_res);
          CONTINUE;
        END IF;
      ELSE
        v_res := '{}'::jsonb;
      END IF;
      -- Hold-if-affordable: balance - held >= amount, and, with a cap, spend(month) + held(key)
      -- + amount <= cap. An open hold id placed again is a no-op.
      v_amount := (v_op ->> 'amount')::bigint;
      v_cap := (v_op ->> 'cap')::bigint;
      IF v_amount < 0 THEN RAISE EXCEPTION 'hold amount must not be negative'; END IF;
      IF v_balance - v_held < v_amount AND EXISTS (SELECT 1 FROM ${s}.holds WHERE account_id = p_account AND hold_id = v_hold) THEN
        v_out := v_out || jsonb_build_array(v_res || jsonb_build_object('ok', true));
        CONTINUE;
      END IF;
      IF v_balance - v_held < v_amount THEN
        v_out := v_out || jsonb_build_array(v_res || jsonb_build_object('ok', false, 'source', 'wallet', 'available', greatest(v_balance - v_held, 0)::text));
        CONTINUE;
      END IF;
      IF v_cap IS NOT NULL THEN
        v_room := v_cap
          - coalesce((SELECT amount FROM ${s}.key_spend WHERE account_id = p_account AND key_id = v_key AND month = v_month), 0)
          - coalesce((v_spend -> v_key ->> v_month)::bigint, 0)
          - (SELECT coalesce(sum(amount), 0) FROM ${s}.holds WHERE account_id = p_account AND key_id = v_key)::bigint;
        IF v_room < v_amount AND NOT EXISTS (SELECT 1 FROM ${s}.holds WHERE account_id = p_account AND hold_id = v_hold) THEN
          v_out := v_out || jsonb_build_array(v_res || jsonb_build_object('ok', false, 'source', 'key_monthly_cap', 'available', greatest(v_room, 0)::text));
          CONTINUE;
        END IF;
      END IF;
      -- The primary key finds an open hold of this id (then nothing changes) in the insert.
      INSERT INTO ${s}.holds (account_id, hold_id, key_id, amount, month, expires_at)
        VALUES (p_account, v_hold, v_key, v_amount, v_month, v_t + (v_op ->> 'ttl')::bigint)
        ON CONFLICT (account_id, hold_id) DO NOTHING;
      IF FOUND THEN v_held := v_held + v_amount; END IF;
      v_out := v_out || jsonb_build_array(v_res || jsonb_build_object('ok', true));
    ELSIF v_kind = 'settle' THEN
      -- Settle, once per (account, hold id): debits the full cost (even past the hold, even
      -- when the hold expired: the output was delivered), adds it to the key's spend, appends
      -- the entry.
      v_settles := true;
      v_cost := (v_op ->> 'cost')::bigint;
      IF v_cost < 0 THEN RAISE EXCEPTION 'settled cost must not be negative'; END IF;
      -- A released hold id stays closed. A settle leaves no closed marker of its own: its
      -- ledger entry, one per (account, hold id) for good, is what a second settle meets, and
      -- a release after it finds no hold to drop.
      IF EXISTS (SELECT 1 FROM ${s}.closed_holds WHERE account_id = p_account AND hold_id = v_hold) THEN
        v_out := v_out || jsonb_build_array(jsonb_build_object('settled', false));
        CONTINUE;
      END IF;
      DELETE FROM ${s}.holds WHERE account_id = p_account AND hold_id = v_hold RETURNING amount, month INTO v_hold_amount, v_hold_month;
      IF FOUND THEN
        v_held := v_held - v_hold_amount;
        v_month := v_hold_month;
      ELSE
        v_hold_amount := 0;
      END IF;
      -- The ledger's unique (account, hold id) index finds an entry already there (a replayed
      -- settle): then nothing is charged. (A hold dropped just above had an id already
      -- settled, so it could never be settled again.) Asked through ON CONFLICT, not a lookup
      -- the planner might serve from another of the account's ledger indexes.
      INSERT INTO ${s}.ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
        VALUES (p_account, v_hold, v_op ->> 'id', v_key, v_op ->> 'model', v_op -> 'units', v_cost, v_hold_amount,
          v_cost > v_hold_amount, v_op ->> 'measured', v_op ->> 'upstream', (v_op ->> 'at')::bigint, v_t)
        ON CONFLICT (account_id, hold_id) DO NOTHING;
      IF NOT FOUND THEN
        v_out := v_out || jsonb_build_array(jsonb_build_object('settled', false));
        CONTINUE;
      END IF;
      v_balance := v_balance - v_cost;
      v_debit := v_debit + v_cost;
      v_spend := jsonb_set(v_spend, ARRAY[v_key], coalesce(v_spend -> v_key, '{}'::jsonb)
        || jsonb_build_object(v_month, (coalesce((v_spend -> v_key ->> v_month)::bigint, 0) + v_cost)::text));
      v_out := v_out || jsonb_build_array(jsonb_build_object('settled', true, 'charged', v_cost::text, 'held', v_hold_amount::text));
    ELSIF v_kind = 'release' THEN
      -- Release: closes the hold id and drops the hold; true when an open one was dropped.
      INSERT INTO ${s}.closed_holds (account_id, hold_id, closed_at) VALUES (p_account, v_hold, v_t) ON CONFLICT DO NOTHING;
      DELETE FROM ${s}.holds WHERE account_id = p_account AND hold_id = v_hold RETURNING amount, expires_at INTO v_hold_amount, v_expires;
      v_dropped := FOUND;
      IF v_dropped THEN v_held := v_held - v_hold_amount; END IF;
      v_out := v_out || jsonb_build_array(jsonb_build_object('released', v_dropped AND v_expires > v_t));
    ELSE
      RAISE EXCEPTION 'unknown operation %', v_kind;
    END IF;
  END LOOP;

  IF v_debit <> 0 THEN
    UPDATE ${s}.wallets SET balance = balance - v_debit WHERE account_id = p_account;
  END IF;
  INSERT INTO ${s}.key_spend AS ks (account_id, key_id, month, amount)
    SELECT p_account, k.key, m.key, m.value::bigint FROM jsonb_each(v_spend) k, jsonb_each_text(k.value) m
    ON CONFLICT (account_id, key_id, month) DO UPDATE SET amount = ks.amount + excluded.amount;
  IF v_settles THEN
    PERFORM set_config('synchronous_commit', v_commit, true);
  ELSE
    PERFORM ${s}.mg_async_commit();
  END IF;
  RETURN v_out;
END $$;
`,
  // 6: the account batch, set-based. Migration 5's batch ran three or four statements per
  // operation (a lookup, a delete, an insert each), and the executor's set-up for each one was
  // most of PostgreSQL's CPU per operation. This one reads the account's open holds and the
  // batch's closed markers in two statements under the wallet lock, decides every operation
  // in memory, in order, exactly as migration 5 did, and writes the outcome at the end, a
  // statement or two per table. Its answers and the rows it leaves are those of migration 5's
  // batch for any sequence of well-formed operations (a test compares the two); a malformed
  // one fails the batch, as it did there. The batches ask for an asynchronous
  // commit with set_config itself: mg_async_commit returns void where its body's SELECT
  // returns text, so PostgreSQL cannot inline it, and parses and plans its body again in
  // every transaction that calls it.
  (s, lockPrefix) => `
-- One bucket's window hits, as in migration 5.
CREATE OR REPLACE FUNCTION ${s}.mg_hits(p_bucket text, p_hits jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:rl:' || p_bucket, 0));
  RETURN ${s}.mg_hits_at(p_bucket, p_hits, ${s}.mg_now());
END $$;

CREATE OR REPLACE FUNCTION ${s}.mg_account_batch(p_account text, p_ops jsonb) RETURNS jsonb LANGUAGE plpgsql
SET enable_bitmapscan = off SET enable_seqscan = off AS $$
DECLARE
  -- Holds, hits and releases ask for an asynchronous commit; a settle in the batch makes the
  -- whole batch commit as a settle alone would.
  v_commit text := current_setting('synchronous_commit');
  v_settles boolean := false;
  -- One answer per operation, in order (an array grows in place; a jsonb array is copied).
  v_out jsonb[];
  -- Each hit_hold's window answer, by operation index.
  v_win jsonb[] := '{}';
  v_op jsonb;
  v_i bigint;
  v_kind text;
  v_bucket text;
  v_hits jsonb;
  v_at bigint[];
  v_t bigint;
  v_balance0 bigint;
  v_balance bigint;
  v_debit bigint;
  v_held0 bigint;
  v_held bigint;
  -- What this batch adds to each key's monthly spend: {key: {month: "amount"}}.
  v_spend jsonb;
  v_key text;
  v_month text;
  v_hold text;
  v_amount bigint;
  v_cap bigint;
  v_room bigint;
  v_cost bigint;
  v_hold_amount bigint;
  v_res jsonb;
  j integer;
  -- The account's open holds when the batch began.
  a_id text[];
  a_amount bigint[];
  a_key text[];
  a_month text[];
  a_expires bigint[];
  -- The batch's view of every hold id it names, one slot per id: the open hold under that id
  -- now (h_open, with its amount, key, month and expiry), whether one was open when the batch
  -- began (h_was, with what it held then), and whether the open one is a hold this batch
  -- placed (h_new). The holds table is written from these at the end.
  h_id text[];
  h_was boolean[];
  h_amount0 bigint[];
  h_key0 text[];
  h_month0 text[];
  h_expires0 bigint[];
  h_open boolean[];
  h_amount bigint[];
  h_key text[];
  h_month text[];
  h_expires bigint[];
  h_new boolean[];
  -- Hold ids with a closed marker (the table's and this batch's releases'), hold ids this
  -- batch has released, and hold ids known to have a ledger entry (one per hold id for good:
  -- a settle's, or a credit's, whose ids are "credit:...").
  v_closed0 text[] := '{}';
  v_closed text[];
  v_released text[];
  v_billed text[] := '{}';
  v_inserted text[];
  v_missing text[];
  -- The ledger entries this batch appends, in order, column by column.
  e_hold text[];
  e_id text[];
  e_key text[];
  e_model text[];
  e_units jsonb[];
  e_cost bigint[];
  e_held bigint[];
  e_measured text[];
  e_upstream text[];
  e_at bigint[];
BEGIN
  -- Every window lock the batch needs, in sorted order, then the wallet row.
  FOR v_bucket IN
    SELECT DISTINCT e ->> 'bucket' FROM jsonb_array_elements(p_ops) e WHERE e ->> 'op' = 'hit_hold' ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:rl:' || v_bucket, 0));
  END LOOP;
  v_balance0 := ${s}.mg_lock_wallet(p_account);
  v_t := ${s}.mg_now();
  -- Each bucket's hits, counted together.
  FOR v_bucket IN
    SELECT DISTINCT e ->> 'bucket' FROM jsonb_array_elements(p_ops) e WHERE e ->> 'op' = 'hit_hold'
  LOOP
    SELECT jsonb_agg(jsonb_build_array((e ->> 'limit')::integer, (e ->> 'window')::bigint) ORDER BY i), array_agg(i ORDER BY i)
      INTO v_hits, v_at
      FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS x(e, i) WHERE e ->> 'op' = 'hit_hold' AND e ->> 'bucket' = v_bucket;
    v_hits := ${s}.mg_hits_at(v_bucket, v_hits, v_t);
    FOR k IN 1 .. array_length(v_at, 1) LOOP
      v_win[v_at[k]] := v_hits -> (k - 1);
    END LOOP;
  END LOOP;
  DELETE FROM ${s}.holds WHERE account_id = p_account AND expires_at <= v_t;
  -- The account's open holds (what the batch must sum anyway), and from them the slots. The
  -- seqscan setting above makes a whole-table scan the planner's last resort, so a plan
  -- cached while a table was small does not scan it whole once it has grown.
  SELECT coalesce(array_agg(hold_id), '{}'), coalesce(array_agg(amount), '{}'), coalesce(array_agg(key_id), '{}'),
         coalesce(array_agg(month), '{}'), coalesce(array_agg(expires_at), '{}'), coalesce(sum(amount), 0)::bigint
    INTO a_id, a_amount, a_key, a_month, a_expires, v_held0
    FROM ${s}.holds WHERE account_id = p_account;
  SELECT array_agg(i.id), array_agg(x.id IS NOT NULL), array_agg(x.amount), array_agg(x.key_id), array_agg(x.month), array_agg(x.expires)
    INTO h_id, h_was, h_amount0, h_key0, h_month0, h_expires0
    FROM (SELECT DISTINCT e ->> 'hold' AS id FROM jsonb_array_elements(p_ops) e) i
    LEFT JOIN unnest(a_id, a_amount, a_key, a_month, a_expires) AS x(id, amount, key_id, month, expires) ON x.id = i.id;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_ops) e WHERE e ->> 'op' IN ('settle', 'release')) THEN
    -- closed_holds has no other index on the account: its key serves this.
    SELECT coalesce(array_agg(hold_id), '{}') INTO v_closed0 FROM ${s}.closed_holds
      WHERE account_id = p_account AND hold_id = ANY (h_id);
  END IF;

  -- The batch is decided in memory. Whether a settle's hold id was settled before is learnt
  -- from the ledger's (account, hold id) key when the entries are written (the one lookup no
  -- plan can move to another index): the run assumes none was, and runs again, knowing, in
  -- the rare case one was (a replayed settle). The first run charges such a settle before it
  -- is known: with costs below 2^53 and at most 256 operations a batch, that arithmetic can
  -- overflow only on a wallet already below about -6.9e18.
  <<decide>>
  LOOP
    v_balance := v_balance0;
    v_held := v_held0;
    v_debit := 0;
    v_spend := '{}'::jsonb;
    v_out := '{}';
    h_open := h_was;
    h_amount := h_amount0;
    h_key := h_key0;
    h_month := h_month0;
    h_expires := h_expires0;
    h_new := array_fill(false, ARRAY[coalesce(array_length(h_id, 1), 0)]);
    v_closed := v_closed0;
    v_released := '{}';
    e_hold := '{}'; e_id := '{}'; e_key := '{}'; e_model := '{}'; e_units := '{}';
    e_cost := '{}'; e_held := '{}'; e_measured := '{}'; e_upstream := '{}'; e_at := '{}';

    FOR v_op, v_i IN SELECT e, i FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS x(e, i) LOOP
      v_kind := v_op ->> 'op';
      v_hold := v_op ->> 'hold';
      v_key := v_op ->> 'key';
      v_month := v_op ->> 'month';
      -- A malformed operation fails the batch, as migration 5's statements failed on it (the
      -- caller then sends the batch's operations one by one, so it fails alone): nothing of it
      -- may reach the decisions below, which no table constraint checks.
      IF v_hold IS NULL
         OR (v_kind IN ('hold', 'hit_hold') AND (v_key IS NULL OR v_month IS NULL OR v_op ->> 'amount' IS NULL OR v_op ->> 'ttl' IS NULL))
         OR (v_kind = 'settle' AND (v_key IS NULL OR v_month IS NULL OR v_op ->> 'cost' IS NULL OR v_op ->> 'id' IS NULL
                                   OR v_op ->> 'model' IS NULL OR v_op -> 'units' IS NULL OR v_op ->> 'at' IS NULL)) THEN
        RAISE EXCEPTION 'malformed % operation', coalesce(v_kind, 'unnamed');
      END IF;
      j := array_position(h_id, v_hold);
      IF v_kind IN ('hold', 'hit_hold') THEN
        IF v_kind = 'hit_hold' THEN
          v_res := v_win[v_i];
          v_res := jsonb_build_object('allowed', v_res -> 0, 'remaining', v_res -> 1, 'reset', v_res -> 2);
          IF NOT (v_res ->> 'allowed')::boolean THEN
            v_out := v_out || v_res;
            CONTINUE;
          END IF;
        ELSE
          v_res := '{}'::jsonb;
        END IF;
        -- Hold-if-affordable: balance - held >= amount, and, with a cap, spend(month) +
        -- held(key) + amount <= cap. An open hold id placed again is a no-op.
        v_amount := (v_op ->> 'amount')::bigint;
        v_cap := (v_op ->> 'cap')::bigint;
        IF v_amount < 0 THEN RAISE EXCEPTION 'hold amount must not be negative'; END IF;
        IF v_balance - v_held < v_amount AND h_open[j] THEN
          v_out := v_out || (v_res || jsonb_build_object('ok', true));
          CONTINUE;
        END IF;
        IF v_balance - v_held < v_amount THEN
          v_out := v_out || (v_res || jsonb_build_object('ok', false, 'source', 'wallet', 'available', greatest(v_balance - v_held, 0)::text));
          CONTINUE;
        END IF;
        IF v_cap IS NOT NULL THEN
          -- The key's open holds: those of the batch's start, plus what this batch opened
          -- under the key, less what it closed.
          v_room := v_cap
            - coalesce((SELECT amount FROM ${s}.key_spend WHERE account_id = p_account AND key_id = v_key AND month = v_month), 0)
            - coalesce((v_spend -> v_key ->> v_month)::bigint, 0)
            - (SELECT coalesce(sum(a), 0) FROM unnest(a_key, a_amount) AS x(k, a) WHERE k = v_key)::bigint
            - (SELECT coalesce(sum(CASE WHEN o AND k = v_key THEN a ELSE 0 END) - sum(CASE WHEN w AND k0 = v_key THEN a0 ELSE 0 END), 0)
                 FROM unnest(h_open, h_key, h_amount, h_was, h_key0, h_amount0) AS x(o, k, a, w, k0, a0))::bigint;
          IF v_room < v_amount AND NOT h_open[j] THEN
            v_out := v_out || (v_res || jsonb_build_object('ok', false, 'source', 'key_monthly_cap', 'available', greatest(v_room, 0)::text));
            CONTINUE;
          END IF;
        END IF;
        IF NOT h_open[j] THEN
          h_open[j] := true;
          h_new[j] := true;
          h_amount[j] := v_amount;
          h_key[j] := v_key;
          h_month[j] := v_month;
          h_expires[j] := v_t + (v_op ->> 'ttl')::bigint;
          v_held := v_held + v_amount;
        END IF;
        v_out := v_out || (v_res || jsonb_build_object('ok', true));
      ELSIF v_kind = 'settle' THEN
        -- Settle, once per (account, hold id): debits the full cost (even past the hold, even
        -- when the hold expired: the output was delivered), adds it to the key's spend,
        -- appends the entry. A released hold id stays closed; a settle leaves no closed
        -- marker of its own: its ledger entry is what a second settle meets. The hold is
        -- dropped before the ledger is asked, as migration 5 did.
        v_settles := true;
        v_cost := (v_op ->> 'cost')::bigint;
        IF v_cost < 0 THEN RAISE EXCEPTION 'settled cost must not be negative'; END IF;
        IF v_hold = ANY (v_closed) THEN
          v_out := v_out || jsonb_build_object('settled', false);
          CONTINUE;
        END IF;
        IF h_open[j] THEN
          h_open[j] := false;
          v_hold_amount := h_amount[j];
          v_month := h_month[j];
          v_held := v_held - v_hold_amount;
        ELSE
          v_hold_amount := 0;
        END IF;
        IF v_hold = ANY (v_billed) OR v_hold = ANY (e_hold) THEN
          v_out := v_out || jsonb_build_object('settled', false);
          CONTINUE;
        END IF;
        e_hold := e_hold || v_hold;
        e_id := e_id || (v_op ->> 'id');
        e_key := e_key || v_key;
        e_model := e_model || (v_op ->> 'model');
        e_units := e_units || (v_op -> 'units');
        e_cost := e_cost || v_cost;
        e_held := e_held || v_hold_amount;
        e_measured := e_measured || (v_op ->> 'measured');
        e_upstream := e_upstream || (v_op ->> 'upstream');
        e_at := e_at || (v_op ->> 'at')::bigint;
        v_balance := v_balance - v_cost;
        v_debit := v_debit + v_cost;
        v_spend := jsonb_set(v_spend, ARRAY[v_key], coalesce(v_spend -> v_key, '{}'::jsonb)
          || jsonb_build_object(v_month, (coalesce((v_spend -> v_key ->> v_month)::bigint, 0) + v_cost)::text));
        v_out := v_out || jsonb_build_object('settled', true, 'charged', v_cost::text, 'held', v_hold_amount::text);
      ELSIF v_kind = 'release' THEN
        -- Release: closes the hold id and drops the hold; true when an open one was dropped.
        IF NOT v_hold = ANY (v_closed) THEN
          v_closed := v_closed || v_hold;
          v_released := v_released || v_hold;
        END IF;
        IF h_open[j] THEN
          h_open[j] := false;
          v_held := v_held - h_amount[j];
          v_out := v_out || jsonb_build_object('released', h_expires[j] > v_t);
        ELSE
          v_out := v_out || jsonb_build_object('released', false);
        END IF;
      ELSE
        RAISE EXCEPTION 'unknown operation %', v_kind;
      END IF;
    END LOOP;

    -- The entries, in the batch's order (so their seqs follow it). An entry the ledger
    -- already has (a settle replayed) undoes them all; the batch is decided again with that
    -- hold id known to be settled.
    IF array_length(e_hold, 1) > 0 THEN
      BEGIN
        WITH added AS (
          INSERT INTO ${s}.ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
            SELECT p_account, hold, id, key, model, units, cost, held, cost > held, measured, upstream, at, v_t
              FROM unnest(e_hold, e_id, e_key, e_model, e_units, e_cost, e_held, e_measured, e_upstream, e_at)
                   WITH ORDINALITY AS x(hold, id, key, model, units, cost, held, measured, upstream, at, n)
             ORDER BY n
            ON CONFLICT (account_id, hold_id) DO NOTHING
            RETURNING hold_id)
        SELECT coalesce(array_agg(hold_id), '{}') INTO v_inserted FROM added;
        IF array_length(v_inserted, 1) IS DISTINCT FROM array_length(e_hold, 1) THEN
          -- Each run leaves out at least one more hold id, so there are at most two. A conflict
          -- on an id this run had already left out would run for ever: it fails instead.
          v_missing := ARRAY(SELECT unnest(e_hold) EXCEPT SELECT unnest(v_inserted) EXCEPT SELECT unnest(v_billed));
          IF cardinality(v_missing) = 0 THEN
            RAISE EXCEPTION 'the ledger refused an entry for a hold id the batch had left out';
          END IF;
          v_billed := v_billed || v_missing;
          RAISE EXCEPTION USING ERRCODE = 'MGDUP';
        END IF;
      EXCEPTION WHEN SQLSTATE 'MGDUP' THEN
        CONTINUE decide;
      END;
    END IF;
    EXIT decide;
  END LOOP;

  -- The rest of the outcome, one statement per table: the holds that closed or were
  -- replaced go, the holds this batch opened (and left open) come in, then the closed
  -- markers, the wallet and the keys' spend.
  DELETE FROM ${s}.holds WHERE account_id = p_account AND hold_id IN (
    SELECT id FROM unnest(h_id, h_was, h_open, h_new) AS x(id, w, o, n) WHERE w AND (NOT o OR n));
  INSERT INTO ${s}.holds (account_id, hold_id, key_id, amount, month, expires_at)
    SELECT p_account, id, k, a, m, e FROM unnest(h_id, h_open, h_new, h_key, h_amount, h_month, h_expires) AS x(id, o, n, k, a, m, e)
     WHERE o AND n;
  IF array_length(v_released, 1) > 0 THEN
    INSERT INTO ${s}.closed_holds (account_id, hold_id, closed_at) SELECT p_account, id, v_t FROM unnest(v_released) AS x(id)
      ON CONFLICT DO NOTHING;
  END IF;
  IF v_debit <> 0 THEN
    UPDATE ${s}.wallets SET balance = balance - v_debit WHERE account_id = p_account;
  END IF;
  IF v_spend <> '{}'::jsonb THEN
    INSERT INTO ${s}.key_spend AS ks (account_id, key_id, month, amount)
      SELECT p_account, k.key, m.key, m.value::bigint FROM jsonb_each(v_spend) k, jsonb_each_text(k.value) m
      ON CONFLICT (account_id, key_id, month) DO UPDATE SET amount = ks.amount + excluded.amount;
  END IF;
  IF v_settles THEN
    PERFORM set_config('synchronous_commit', v_commit, true);
  ELSE
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  RETURN to_jsonb(v_out);
END $$;
`,
  // 7: every wallet change is a ledger entry, so a balance is always minus the sum of its
  // ledger's costs. A new account's opening balance is a credit (mg_credit, so it takes the
  // wallet lock and its entry as every credit does) with the one opening-balance credit id, so
  // an account gets one at most; a zero opening balance writes nothing. Books written before
  // hold opening balances and top-ups no entry explains: each wallet whose balance is not minus
  // its ledger's sum gets one opening-balance credit for the difference, appended (a new seq:
  // cursors already handed out stay valid and see it) and dated at the account's creation (the
  // upgrade's time for a wallet without an account record). The wallets are locked against
  // writes meanwhile, so an older instance still running cannot settle between a balance and
  // its sum.
  (s) => `
CREATE OR REPLACE FUNCTION ${s}.mg_create_account(p_id text, p_grants jsonb, p_created bigint, p_initial bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ${s}.accounts (id, grants, created_at) VALUES (p_id, p_grants, p_created) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN RETURN false; END IF;
  IF p_initial <> 0 THEN
    PERFORM ${s}.mg_credit(p_id, '${OPENING_BALANCE_ID}', p_initial,
      '{"kind":"credit","reason":"${OPENING_BALANCE_REASON}"}'::jsonb, p_created);
  END IF;
  RETURN true;
END $$;

LOCK TABLE ${s}.wallets IN EXCLUSIVE MODE;
INSERT INTO ${s}.ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
SELECT w.account_id, 'credit:${OPENING_BALANCE_ID}', '${OPENING_BALANCE_ID}', '', '',
       '{"kind":"credit","reason":"${OPENING_BALANCE_REASON}"}'::jsonb, -(w.balance + coalesce(l.total, 0))::bigint, 0, false, NULL, NULL,
       coalesce(a.created_at, ${s}.mg_now()), ${s}.mg_now()
  FROM ${s}.wallets AS w
  LEFT JOIN (SELECT account_id, sum(cost) AS total FROM ${s}.ledger GROUP BY account_id) AS l ON l.account_id = w.account_id
  LEFT JOIN ${s}.accounts AS a ON a.id = w.account_id
 WHERE w.balance + coalesce(l.total, 0) <> 0
 ORDER BY w.account_id
ON CONFLICT DO NOTHING;
`,
  // 8: Idempotency-Key answers count against a byte quota per account. mg_idem_complete
  // stores a finished record with its account and size under a transaction-scoped advisory
  // lock on the account, drops the account's expired records, then evicts its oldest (first
  // to expire; the one just stored counts as newest) until the total fits. The lock makes an
  // account's stores run one at a time, so its total is exact: never past the cap.
  (s, lockPrefix) => `
ALTER TABLE ${s}.idempotency ADD COLUMN account text, ADD COLUMN bytes bigint NOT NULL DEFAULT 0;
CREATE INDEX idempotency_account ON ${s}.idempotency (account, expires_at) WHERE account IS NOT NULL;

CREATE FUNCTION ${s}.mg_idem_complete(
  p_scope text, p_fingerprint text, p_response jsonb, p_ttl bigint, p_account text, p_bytes bigint, p_cap bigint
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_t bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:idem:' || p_account, 0));
  v_t := ${s}.mg_now();
  INSERT INTO ${s}.idempotency (scope, fingerprint, response, expires_at, account, bytes)
    VALUES (p_scope, p_fingerprint, p_response, v_t + p_ttl, p_account, p_bytes)
    ON CONFLICT (scope) DO UPDATE SET fingerprint = excluded.fingerprint, response = excluded.response,
      expires_at = excluded.expires_at, account = excluded.account, bytes = excluded.bytes;
  DELETE FROM ${s}.idempotency WHERE account = p_account AND expires_at <= v_t;
  -- Walking from the newest, every record from the one that takes the running total past
  -- the cap onwards goes: that is evicting the oldest until the rest fits.
  DELETE FROM ${s}.idempotency WHERE scope IN (
    SELECT w.scope FROM (
      SELECT scope, sum(bytes) OVER (ORDER BY scope = p_scope DESC, expires_at DESC, scope DESC ROWS UNBOUNDED PRECEDING) AS newer
        FROM ${s}.idempotency WHERE account = p_account
    ) AS w WHERE w.newer > p_cap);
END $$;
`,
  // 9: limits beyond the monthly cap. A key's model allow-list, tokens per minute and budgets
  // (one jsonb, null for none) and an account's budgets; the spend per key and per account
  // (scope '') in each UTC day, week (from Monday) and month, counted from the ledger by a
  // statement trigger, so every way a charge is appended (the batch, mg_settle) counts it in
  // the same transaction; a hold checked against budgets (mg_place_hold_budgeted, under the
  // wallet row lock every money operation of the account takes); and the windows of tokens
  // per minute (mg_tokens_take / mg_tokens_set, under the bucket's advisory lock).
  (s, lockPrefix) => `
ALTER TABLE ${s}.api_keys ADD COLUMN limits jsonb;
ALTER TABLE ${s}.accounts ADD COLUMN budgets jsonb;

CREATE TABLE ${s}.period_spend (
  account_id text NOT NULL,
  scope text NOT NULL,
  period text NOT NULL,
  amount bigint NOT NULL,
  PRIMARY KEY (account_id, scope, period)
);

-- The day, week and month names of a unix-ms time, as the gateway names them
-- ("d2026-11-26", "w2026-11-23", "m2026-11"); integer days, so no float is involved.
CREATE FUNCTION ${s}.mg_periods(p_at bigint) RETURNS text[] LANGUAGE sql IMMUTABLE AS $f$
  SELECT ARRAY[
    'd' || to_char(d, 'YYYY-MM-DD'),
    'w' || to_char(d - (extract(isodow FROM d)::integer - 1), 'YYYY-MM-DD'),
    'm' || to_char(d, 'YYYY-MM')]
    FROM (SELECT date '1970-01-01' + (p_at / 86400000)::integer AS d) AS x
$f$;

CREATE FUNCTION ${s}.mg_count_period_spend() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO ${s}.period_spend (account_id, scope, period, amount)
  SELECT a.account_id, sc.scope, p.period, sum(a.cost)
    FROM added AS a
    CROSS JOIN LATERAL (VALUES (a.key_id), ('')) AS sc(scope)
    CROSS JOIN LATERAL unnest(${s}.mg_periods(a.at)) AS p(period)
   WHERE a.key_id <> ''
   GROUP BY a.account_id, sc.scope, p.period
  ON CONFLICT (account_id, scope, period) DO UPDATE SET amount = ${s}.period_spend.amount + excluded.amount;
  RETURN NULL;
END $f$;
CREATE TRIGGER ledger_period_spend AFTER INSERT ON ${s}.ledger
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION ${s}.mg_count_period_spend();

-- The last five weeks' charges, counted in now, so a budget set right after the upgrade
-- sees its period's spend.
INSERT INTO ${s}.period_spend (account_id, scope, period, amount)
SELECT l.account_id, sc.scope, p.period, sum(l.cost)
  FROM ${s}.ledger AS l
  CROSS JOIN LATERAL (VALUES (l.key_id), ('')) AS sc(scope)
  CROSS JOIN LATERAL unnest(${s}.mg_periods(l.at)) AS p(period)
 WHERE l.key_id <> '' AND l.at >= ${s}.mg_now() - 35 * 86400000::bigint
 GROUP BY l.account_id, sc.scope, p.period;

-- Hold-if-affordable as mg_place_hold, and then within every budget of p_budgets
-- ([{scope: "key" | "account", period, cap, source}], money as decimal strings): the scope's
-- spend in the period plus what its open holds hold plus the amount stays within the cap.
CREATE FUNCTION ${s}.mg_place_hold_budgeted(
  p_account text, p_hold text, p_key text, p_amount bigint, p_cap bigint, p_month text, p_ttl bigint, p_budgets jsonb,
  OUT o_ok boolean, OUT o_source text, OUT o_available bigint
) LANGUAGE plpgsql AS $f$
DECLARE v_balance bigint; v_t bigint; v_held bigint; v_held_key bigint; v_room bigint; v_b jsonb;
BEGIN
  PERFORM ${s}.mg_async_commit();
  v_balance := ${s}.mg_lock_wallet(p_account);
  v_t := ${s}.mg_now();
  DELETE FROM ${s}.holds WHERE account_id = p_account AND expires_at <= v_t;
  o_ok := true;
  IF EXISTS (SELECT 1 FROM ${s}.holds WHERE account_id = p_account AND hold_id = p_hold) THEN RETURN; END IF;
  SELECT coalesce(sum(amount), 0)::bigint, coalesce(sum(amount) FILTER (WHERE key_id = p_key), 0)::bigint
    INTO v_held, v_held_key FROM ${s}.holds WHERE account_id = p_account;
  IF v_balance - v_held < p_amount THEN
    o_ok := false; o_source := 'wallet'; o_available := greatest(v_balance - v_held, 0);
    RETURN;
  END IF;
  IF p_cap IS NOT NULL THEN
    v_room := p_cap - v_held_key
      - coalesce((SELECT amount FROM ${s}.key_spend WHERE account_id = p_account AND key_id = p_key AND month = p_month), 0);
    IF v_room < p_amount THEN
      o_ok := false; o_source := 'key_monthly_cap'; o_available := greatest(v_room, 0);
      RETURN;
    END IF;
  END IF;
  FOR v_b IN SELECT value FROM jsonb_array_elements(p_budgets) LOOP
    v_room := (v_b ->> 'cap')::bigint
      - CASE WHEN v_b ->> 'scope' = 'key' THEN v_held_key ELSE v_held END
      - coalesce((SELECT amount FROM ${s}.period_spend WHERE account_id = p_account
                    AND scope = CASE WHEN v_b ->> 'scope' = 'key' THEN p_key ELSE '' END
                    AND period = v_b ->> 'period'), 0);
    IF v_room < p_amount THEN
      o_ok := false; o_source := v_b ->> 'source'; o_available := greatest(v_room, 0);
      RETURN;
    END IF;
  END LOOP;
  INSERT INTO ${s}.holds (account_id, hold_id, key_id, amount, month, expires_at)
    VALUES (p_account, p_hold, p_key, p_amount, p_month, v_t + p_ttl);
END $f$;

-- Tokens per minute: one row per call that took tokens from a bucket's window.
CREATE TABLE ${s}.token_takes (
  bucket text NOT NULL,
  take_id text NOT NULL,
  at bigint NOT NULL,
  tokens bigint NOT NULL,
  PRIMARY KEY (bucket, take_id)
);
CREATE INDEX token_takes_at ON ${s}.token_takes (bucket, at);

-- Takes p_tokens from the bucket's window if what its takes of the last p_window ms hold plus
-- p_tokens stays within p_limit. Returns whether it took, what is left, and when taken the ms
-- until the oldest take leaves; when refused the ms until enough has left for p_tokens to
-- fit (-1: they never fit).
CREATE FUNCTION ${s}.mg_tokens_take(
  p_bucket text, p_take text, p_tokens bigint, p_limit bigint, p_window bigint,
  OUT o_allowed boolean, OUT o_remaining bigint, OUT o_reset bigint
) LANGUAGE plpgsql AS $f$
DECLARE v_t bigint; v_used bigint; v_free bigint; r record;
BEGIN
  PERFORM ${s}.mg_async_commit();
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:tpm:' || p_bucket, 0));
  v_t := ${s}.mg_now();
  DELETE FROM ${s}.token_takes WHERE bucket = p_bucket AND at <= v_t - p_window;
  SELECT coalesce(sum(tokens), 0)::bigint INTO v_used FROM ${s}.token_takes WHERE bucket = p_bucket;
  -- A take id the window holds already is not taken twice.
  o_allowed := EXISTS (SELECT 1 FROM ${s}.token_takes WHERE bucket = p_bucket AND take_id = p_take);
  o_reset := 0;
  IF o_allowed OR v_used + p_tokens <= p_limit THEN
    IF NOT o_allowed THEN
      INSERT INTO ${s}.token_takes (bucket, take_id, at, tokens) VALUES (p_bucket, p_take, v_t, p_tokens);
      v_used := v_used + p_tokens;
    END IF;
    o_allowed := true;
    o_remaining := greatest(p_limit - v_used, 0);
    -- When the oldest take leaves the window.
    SELECT greatest(min(at) + p_window - v_t, 0) INTO o_reset FROM ${s}.token_takes WHERE bucket = p_bucket;
    RETURN;
  END IF;
  o_remaining := greatest(p_limit - v_used, 0);
  IF p_tokens > p_limit THEN o_reset := -1; RETURN; END IF;
  v_free := p_limit - v_used;
  FOR r IN SELECT at, tokens FROM ${s}.token_takes WHERE bucket = p_bucket ORDER BY at, take_id LOOP
    v_free := v_free + r.tokens;
    IF v_free >= p_tokens THEN o_reset := greatest(r.at + p_window - v_t, 1); RETURN; END IF;
  END LOOP;
END $f$;

-- The sweep as before, and token takes that left every window.
CREATE OR REPLACE FUNCTION ${s}.mg_sweep() RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_t bigint := ${s}.mg_now(); v_bucket text;
BEGIN
  PERFORM ${s}.mg_async_commit();
  DELETE FROM ${s}.holds WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.holds WHERE expires_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
  DELETE FROM ${s}.closed_holds WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.closed_holds WHERE closed_at <= v_t - ${CLOSED_TTL_MS} LIMIT 10000 FOR UPDATE SKIP LOCKED));
  -- A window whose newest hit has left goes with all its hits, under the window's own lock
  -- (tried, never waited for), checked again once held, so no hit is lost or miscounted.
  FOR v_bucket IN SELECT bucket FROM ${s}.rate_windows WHERE until <= v_t LIMIT 500 LOOP
    IF pg_try_advisory_xact_lock(hashtextextended('${lockPrefix}:rl:' || v_bucket, 0)) THEN
      DELETE FROM ${s}.rate_windows WHERE bucket = v_bucket AND until <= v_t;
      IF FOUND THEN DELETE FROM ${s}.rate_hits WHERE bucket = v_bucket; END IF;
    END IF;
  END LOOP;
  DELETE FROM ${s}.leases WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.leases WHERE expires_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
  DELETE FROM ${s}.jobs WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.jobs WHERE gone_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
  DELETE FROM ${s}.idempotency WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.idempotency WHERE expires_at <= v_t LIMIT 10000 FOR UPDATE SKIP LOCKED));
  -- Token takes an hour old have left every window (a minute); an idle key's go here.
  DELETE FROM ${s}.token_takes WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ${s}.token_takes WHERE at <= v_t - 3600000 LIMIT 10000 FOR UPDATE SKIP LOCKED));
END $$;

-- Corrects a take to the tokens the call used, under the same lock, so a take never reads a
-- window half-corrected. A take that left the window already changes nothing.
CREATE FUNCTION ${s}.mg_tokens_set(p_bucket text, p_take text, p_tokens bigint) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM ${s}.mg_async_commit();
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:tpm:' || p_bucket, 0));
  UPDATE ${s}.token_takes SET tokens = p_tokens WHERE bucket = p_bucket AND take_id = p_take;
END $f$;
`,
  // 10: a charge keeps the unit prices it was computed at (jsonb, USD decimal strings by the
  // part of the units each prices), so the audit re-derives its cost; older charges have
  // none. The account batch of migration 6 is redefined with the settle's prices written.
  (s, lockPrefix) => `
ALTER TABLE ${s}.ledger ADD COLUMN prices jsonb;
${batchWithPrices((MIGRATIONS[5] as (s: string, l: string) => string)(s, lockPrefix))}`,
  // 11: the response cache, a row per entry with its expiry; mg_cache_put stores one and
  // evicts its account's oldest to fit, under the account's cache lock. A cache hit's ledger
  // entry is measured "cache".
  (s, lockPrefix) => `
ALTER TABLE ${s}.ledger DROP CONSTRAINT ledger_measured_check;
ALTER TABLE ${s}.ledger ADD CONSTRAINT ledger_measured_check CHECK (measured IN ('usage', 'tokenizer', 'estimate', 'cache'));
CREATE TABLE ${s}.response_cache (
  key text PRIMARY KEY,
  account text NOT NULL,
  value text NOT NULL,
  bytes bigint NOT NULL,
  stored_at bigint NOT NULL,
  expires_at bigint NOT NULL
);
CREATE INDEX response_cache_account ON ${s}.response_cache (account, expires_at);
CREATE INDEX response_cache_expiry ON ${s}.response_cache (expires_at);
CREATE FUNCTION ${s}.mg_cache_put(p_key text, p_account text, p_value text, p_bytes bigint, p_ttl bigint, p_cap bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_t bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('${lockPrefix}:cache:' || p_account, 0));
  v_t := ${s}.mg_now();
  INSERT INTO ${s}.response_cache (key, account, value, bytes, stored_at, expires_at)
    VALUES (p_key, p_account, p_value, p_bytes, v_t, v_t + p_ttl)
    ON CONFLICT (key) DO UPDATE SET account = excluded.account, value = excluded.value, bytes = excluded.bytes,
      stored_at = excluded.stored_at, expires_at = excluded.expires_at;
  DELETE FROM ${s}.response_cache WHERE account = p_account AND expires_at <= v_t;
  -- Walking from the newest (the one just stored first), every entry from the one that takes
  -- the running total past the cap onwards goes: the oldest are evicted until the rest fits.
  DELETE FROM ${s}.response_cache WHERE key IN (
    SELECT w.key FROM (
      SELECT key, sum(bytes) OVER (ORDER BY key = p_key DESC, expires_at DESC, key DESC ROWS UNBOUNDED PRECEDING) AS newer
        FROM ${s}.response_cache WHERE account = p_account
    ) AS w WHERE w.newer > p_cap);
END $$;
`,
  // 12: files and batches (OpenAI's Files and Batch APIs): each record as jsonb beside what
  // lists and finds it, a file's bytes in a table of their own, and each finished line of a
  // batch once per custom id.
  (s) => `
CREATE TABLE ${s}.files (
  id text PRIMARY KEY,
  account_id text NOT NULL,
  created_at bigint NOT NULL,
  data jsonb NOT NULL
);
CREATE INDEX files_account ON ${s}.files (account_id, created_at, id COLLATE "C");
CREATE TABLE ${s}.file_contents (
  id text PRIMARY KEY,
  content bytea NOT NULL
);
CREATE TABLE ${s}.batches (
  id text PRIMARY KEY,
  account_id text NOT NULL,
  created_at bigint NOT NULL,
  done boolean NOT NULL,
  rev integer NOT NULL,
  data jsonb NOT NULL
);
CREATE INDEX batches_account ON ${s}.batches (account_id, created_at, id COLLATE "C");
CREATE INDEX batches_running ON ${s}.batches (done) WHERE NOT done;
CREATE TABLE ${s}.batch_lines (
  batch_id text NOT NULL,
  custom_id text NOT NULL,
  data jsonb NOT NULL,
  PRIMARY KEY (batch_id, custom_id)
);
`,
  // 13: a settle's spend counts in the month its charge is dated in (the month the operation
  // names, as the ledger entry's time and the period budgets do), never in the month its hold
  // was placed: a call held on the 31st and answered after midnight is the new month's spend.
  // The account batch of migration 10 is redefined so.
  (s, lockPrefix) => settleInChargeMonth(batchWithPrices((MIGRATIONS[5] as (s: string, l: string) => string)(s, lockPrefix))),
];

/**
 * Migration 6's account batch with each settle's `prices` written to the ledger beside its
 * units. Each edit must apply exactly once (the text it edits is a migration's: it never
 * changes), else the migration fails rather than define a batch that drops the prices.
 */
function batchWithPrices(sql: string): string {
  const edits: Array<[string, string]> = [
    ['  e_units jsonb[];\n', '  e_units jsonb[];\n  e_prices jsonb[];\n'],
    ["e_units := '{}';\n", "e_units := '{}'; e_prices := '{}';\n"],
    ["e_units := e_units || (v_op -> 'units');\n", "e_units := e_units || (v_op -> 'units');\n        e_prices := e_prices || nullif(v_op -> 'prices', 'null'::jsonb);\n"],
    ['units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)\n            SELECT p_account, hold, id, key, model, units, cost, held, cost > held, measured, upstream, at, v_t',
     'units, cost, held, exceeded_hold, measured, upstream, prices, at, recorded_at)\n            SELECT p_account, hold, id, key, model, units, cost, held, cost > held, measured, upstream, prices, at, v_t'],
    ['FROM unnest(e_hold, e_id, e_key, e_model, e_units, e_cost, e_held, e_measured, e_upstream, e_at)\n                   WITH ORDINALITY AS x(hold, id, key, model, units, cost, held, measured, upstream, at, n)',
     'FROM unnest(e_hold, e_id, e_key, e_model, e_units, e_cost, e_held, e_measured, e_upstream, e_prices, e_at)\n                   WITH ORDINALITY AS x(hold, id, key, model, units, cost, held, measured, upstream, prices, at, n)'],
  ];
  let out = sql;
  for (const [from, to] of edits) {
    if (out.split(from).length !== 2) throw new Error(`migration 10: the account batch to edit does not read as expected (${from.trim().slice(0, 40)})`);
    out = out.replace(from, to);
  }
  return out;
}

/** Migration 10's account batch without the line that moved a settle's spend to its hold's month. */
function settleInChargeMonth(sql: string): string {
  const line = '          v_month := h_month[j];\n';
  if (sql.split(line).length !== 2) throw new Error('migration 13: the account batch to edit does not read as expected (v_month := h_month[j])');
  return sql.replace(line, '');
}

/**
 * Creates the schema if needed and applies the missing migrations, in one transaction under
 * an advisory lock named after the schema.
 */
export async function migrate(sql: postgres.Sql<{ bigint: bigint }>, schema: string, quoted: string, timeoutMs: number): Promise<void> {
  await sql.begin(async (tx) => {
    // Waiting for another instance's migrations may outlast the statement timeout of calls.
    await tx.unsafe(`SET LOCAL statement_timeout = ${Math.floor(timeoutMs)}`);
    await tx.unsafe('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`model-gateway:migrate:${schema}`]);
    await tx.unsafe(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
    await tx.unsafe(
      `CREATE TABLE IF NOT EXISTS ${quoted}.schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const rows = await tx.unsafe<{ v: number | null }[]>(`SELECT max(version) AS v FROM ${quoted}.schema_migrations`);
    const applied = rows[0]?.v ?? 0;
    if (applied > MIGRATIONS.length) {
      throw new Error(
        `schema "${schema}" was written by a newer model-gateway (version ${applied}; this one knows ${MIGRATIONS.length})`,
      );
    }
    for (let v = applied; v < MIGRATIONS.length; v++) {
      // Several statements in one message: the simple query protocol.
      await tx.unsafe((MIGRATIONS[v] as (s: string, l: string) => string)(quoted, schema)).simple();
      await tx.unsafe(`INSERT INTO ${quoted}.schema_migrations (version) VALUES ($1)`, [v + 1]);
    }
  });
}
