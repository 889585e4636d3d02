/**
 * The SQLite schema, as numbered migrations. `PRAGMA user_version` records how many ran; they
 * run inside one IMMEDIATE transaction, so two processes opening one file never both apply one.
 *
 * Rules the schema keeps:
 * - Money (balances, holds, spend, costs) is INTEGER nano-USD, never REAL; tables are STRICT, so
 *   SQLite refuses any value that is not an exact integer.
 * - Times are INTEGER unix ms from the store's clock.
 * - The ledger is append-only: triggers refuse UPDATE and DELETE on it.
 */
import { OPENING_BALANCE_ID, OPENING_BALANCE_REASON } from '../wallet-entries.js';

export const MIGRATIONS: readonly string[] = [
  `
CREATE TABLE accounts (
  id TEXT PRIMARY KEY,
  grants TEXT NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;

-- A wallet is apart from its account record: a top-up may come first, as in every driver.
CREATE TABLE wallets (
  account_id TEXT PRIMARY KEY,
  balance INTEGER NOT NULL
) STRICT;

CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  digest TEXT NOT NULL UNIQUE,
  prefix TEXT NOT NULL,
  account_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  model TEXT,
  label TEXT,
  monthly_cap INTEGER,
  disabled INTEGER NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX api_keys_account ON api_keys (account_id);

-- Open holds. A row whose expires_at has passed counts for nothing and is deleted by the
-- next write of its account (or the sweep).
CREATE TABLE holds (
  account_id TEXT NOT NULL,
  hold_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  amount INTEGER NOT NULL CHECK (amount >= 0),
  month TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, hold_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX holds_expiry ON holds (expires_at);

-- Hold ids closed by a settle or a release, kept a day, so a replay changes nothing.
CREATE TABLE closed_holds (
  account_id TEXT NOT NULL,
  hold_id TEXT NOT NULL,
  closed_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, hold_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX closed_holds_age ON closed_holds (closed_at);

CREATE TABLE key_spend (
  account_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  month TEXT NOT NULL,
  amount INTEGER NOT NULL,
  PRIMARY KEY (account_id, key_id, month)
) STRICT, WITHOUT ROWID;

CREATE TABLE ledger (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  account_id TEXT NOT NULL,
  hold_id TEXT NOT NULL,
  id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  model TEXT NOT NULL,
  units TEXT NOT NULL,
  cost INTEGER NOT NULL,
  held INTEGER NOT NULL,
  exceeded_hold INTEGER NOT NULL,
  measured TEXT CHECK (measured IN ('usage', 'tokenizer', 'estimate')),
  upstream TEXT,
  at INTEGER NOT NULL,
  recorded_at INTEGER NOT NULL
) STRICT;
-- One entry per hold id and account, for good: a settle replayed after the closed marker
-- was swept still changes nothing.
CREATE UNIQUE INDEX ledger_hold ON ledger (account_id, hold_id);
CREATE INDEX ledger_account ON ledger (account_id, seq);
CREATE INDEX ledger_key ON ledger (account_id, key_id, seq);
CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;

-- A rate window: how many hits it counts (kept beside them, so a hit never counts rows) and
-- when its newest hit leaves it; and one row per counted hit (migration 3 changes both).
CREATE TABLE rate_windows (
  bucket TEXT PRIMARY KEY,
  hits INTEGER NOT NULL,
  until INTEGER NOT NULL
) STRICT;
CREATE INDEX rate_windows_until ON rate_windows (until);
CREATE TABLE rate_hits (
  bucket TEXT NOT NULL,
  at INTEGER NOT NULL
) STRICT;
CREATE INDEX rate_hits_bucket ON rate_hits (bucket, at);

CREATE TABLE leases (
  pool TEXT NOT NULL,
  lease_id TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (pool, lease_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX leases_expiry ON leases (expires_at);

CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  status TEXT NOT NULL,
  gone_at INTEGER NOT NULL,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX jobs_unfinished ON jobs (status) WHERE status NOT IN ('completed', 'failed');
CREATE INDEX jobs_gone ON jobs (gone_at);

CREATE TABLE brands (
  account_id TEXT NOT NULL,
  id TEXT NOT NULL,
  data TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, id)
) STRICT;

CREATE TABLE documents (
  account_id TEXT NOT NULL,
  id TEXT NOT NULL,
  data TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, id)
) STRICT;

CREATE TABLE document_versions (
  account_id TEXT PRIMARY KEY,
  version INTEGER NOT NULL
) STRICT;

CREATE TABLE idempotency (
  scope TEXT PRIMARY KEY,
  fingerprint TEXT NOT NULL,
  response TEXT,
  expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX idempotency_expiry ON idempotency (expires_at);
`,
  // 2: an account's job listing (GET /videos) reads through this index, in its page order.
  `
CREATE INDEX jobs_account ON jobs (
  json_extract(data, '$.accountId'), json_extract(data, '$.object'), json_extract(data, '$.createdAt'), id
);
`,
  // 3: fewer pages written per billed call (in WAL mode every page a transaction changes is
  // one more frame written at commit, and that is most of what a write costs):
  // - open holds lose their expiry index: the once-a-minute sweep scans the small table
  //   instead of every hold and settle keeping the index current;
  // - a rate window's hits are one row per millisecond with a count, in a table clustered on
  //   (bucket, at) (no separate index to keep), and its `until` moves at most once a minute,
  //   so an ordinary hit leaves the window's index alone. The counted hits move over as they are.
  `
DROP INDEX holds_expiry;

CREATE TABLE rate_hits_v3 (
  bucket TEXT NOT NULL,
  at INTEGER NOT NULL,
  n INTEGER NOT NULL,
  PRIMARY KEY (bucket, at)
) STRICT, WITHOUT ROWID;
INSERT INTO rate_hits_v3 (bucket, at, n) SELECT bucket, at, count(*) FROM rate_hits GROUP BY bucket, at;
DROP TABLE rate_hits;
ALTER TABLE rate_hits_v3 RENAME TO rate_hits;

CREATE TABLE rate_windows_v3 (
  bucket TEXT PRIMARY KEY,
  hits INTEGER NOT NULL,
  until INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO rate_windows_v3 (bucket, hits, until) SELECT bucket, hits, until FROM rate_windows;
DROP TABLE rate_windows;
ALTER TABLE rate_windows_v3 RENAME TO rate_windows;
CREATE INDEX rate_windows_until ON rate_windows (until);
`,
  // 4: rate windows moved to the gateway process's memory (the driver serves one process, and
  // two window hits per call were most of the file's writes beyond the books).
  `
DROP TABLE rate_hits;
DROP TABLE rate_windows;
`,
  // 5: every wallet change is a ledger entry (opening balances and top-ups too), so a balance
  // is always minus the sum of its ledger's costs. Books written before that hold opening
  // balances and top-ups no entry explains: each wallet whose balance is not minus its
  // ledger's sum gets one opening-balance credit for the difference (the credit id the account
  // store gives opening balances, so an account gets one at most). It is appended (a new seq:
  // page cursors already handed out stay valid and see it) and dated at the account's creation
  // (the upgrade's time for a wallet without an account record).
  `
INSERT INTO ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
SELECT w.account_id, 'credit:${OPENING_BALANCE_ID}', '${OPENING_BALANCE_ID}', '', '',
       '{"kind":"credit","reason":"${OPENING_BALANCE_REASON}"}', -(w.balance + coalesce(l.total, 0)), 0, 0, NULL, NULL,
       coalesce(a.created_at, CAST(strftime('%s', 'now') AS INTEGER) * 1000), CAST(strftime('%s', 'now') AS INTEGER) * 1000
  FROM wallets AS w
  LEFT JOIN (SELECT account_id, sum(cost) AS total FROM ledger GROUP BY account_id) AS l ON l.account_id = w.account_id
  LEFT JOIN accounts AS a ON a.id = w.account_id
 WHERE w.balance + coalesce(l.total, 0) <> 0
 ORDER BY w.account_id
ON CONFLICT DO NOTHING;
`,
  // 6: Idempotency-Key answers count against a byte quota per account: a finished record
  // names its account and its size, and an account's records are found in expiry order.
  `
ALTER TABLE idempotency ADD COLUMN account TEXT;
ALTER TABLE idempotency ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX idempotency_account ON idempotency (account, expires_at) WHERE account IS NOT NULL;
`,
  // 7: limits beyond the monthly cap. A key's model allow-list, tokens per minute and budgets
  // (one JSON text, null for none), an account's budgets, and the spend per key and per account
  // in each UTC day, week (from Monday) and month, which budgets are checked against (scope ''
  // is the whole account). The spend of the last five weeks' charges is counted in now, so a
  // budget set right after the upgrade sees its period's spend.
  `
ALTER TABLE api_keys ADD COLUMN limits TEXT;
ALTER TABLE accounts ADD COLUMN budgets TEXT;
CREATE TABLE period_spend (
  account_id TEXT NOT NULL,
  scope TEXT NOT NULL,
  period TEXT NOT NULL,
  amount INTEGER NOT NULL,
  PRIMARY KEY (account_id, scope, period)
) STRICT, WITHOUT ROWID;
WITH recent AS (
  SELECT account_id, key_id, at, cost FROM ledger
   WHERE key_id <> '' AND at >= (CAST(strftime('%s', 'now') AS INTEGER) - 35 * 86400) * 1000
)
INSERT INTO period_spend (account_id, scope, period, amount)
SELECT account_id, scope, period, sum(cost) FROM (
  SELECT account_id, key_id AS scope, 'd' || strftime('%Y-%m-%d', at / 1000, 'unixepoch') AS period, cost FROM recent
  UNION ALL
  SELECT account_id, key_id AS scope, 'w' || date(at / 1000, 'unixepoch', '-6 days', 'weekday 1') AS period, cost FROM recent
  UNION ALL
  SELECT account_id, key_id AS scope, 'm' || strftime('%Y-%m', at / 1000, 'unixepoch') AS period, cost FROM recent
  UNION ALL
  SELECT account_id, '' AS scope, 'd' || strftime('%Y-%m-%d', at / 1000, 'unixepoch') AS period, cost FROM recent
  UNION ALL
  SELECT account_id, '' AS scope, 'w' || date(at / 1000, 'unixepoch', '-6 days', 'weekday 1') AS period, cost FROM recent
  UNION ALL
  SELECT account_id, '' AS scope, 'm' || strftime('%Y-%m', at / 1000, 'unixepoch') AS period, cost FROM recent
) GROUP BY account_id, scope, period;
`,
  // 8: a charge keeps the unit prices it was computed at (JSON, USD decimal strings by the
  // part of the units each prices), so the audit re-derives its cost. Older charges have none.
  `
ALTER TABLE ledger ADD COLUMN prices TEXT;
`,
  // 9: rate windows and token windows back in the file, so the processes that share it
  // (`serve --workers N`) count in the same windows and every limit is exact across them. A
  // window's hits are one row per millisecond with a count, clustered on (bucket, at), and
  // its count of them (with its last hit, for the sweep) in a row of its own; token takes one
  // row per call, found by bucket and id and read in time order.
  `
CREATE TABLE rate_windows (
  bucket TEXT PRIMARY KEY,
  hits INTEGER NOT NULL,
  last INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE rate_hits (
  bucket TEXT NOT NULL,
  at INTEGER NOT NULL,
  n INTEGER NOT NULL,
  PRIMARY KEY (bucket, at)
) STRICT, WITHOUT ROWID;
CREATE TABLE token_takes (
  bucket TEXT NOT NULL,
  take_id TEXT NOT NULL,
  at INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  PRIMARY KEY (bucket, take_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX token_takes_at ON token_takes (bucket, at);
`,
  // 10: the response cache (one row per entry, found by key, its account's in expiry order),
  // and a cache hit's ledger entry measured "cache": SQLite cannot change a CHECK, so the
  // ledger is copied into a table that allows it (every row, seq included) and takes its name.
  `
CREATE TABLE response_cache (
  key TEXT PRIMARY KEY,
  account TEXT NOT NULL,
  value TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  stored_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX response_cache_account ON response_cache (account, expires_at);
CREATE TABLE ledger_v10 (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  account_id TEXT NOT NULL,
  hold_id TEXT NOT NULL,
  id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  model TEXT NOT NULL,
  units TEXT NOT NULL,
  cost INTEGER NOT NULL,
  held INTEGER NOT NULL,
  exceeded_hold INTEGER NOT NULL,
  measured TEXT CHECK (measured IN ('usage', 'tokenizer', 'estimate', 'cache')),
  upstream TEXT,
  at INTEGER NOT NULL,
  recorded_at INTEGER NOT NULL,
  prices TEXT
) STRICT;
INSERT INTO ledger_v10 (seq, account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at, prices)
SELECT seq, account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at, prices FROM ledger;
DROP TABLE ledger;
ALTER TABLE ledger_v10 RENAME TO ledger;
CREATE UNIQUE INDEX ledger_hold ON ledger (account_id, hold_id);
CREATE INDEX ledger_account ON ledger (account_id, seq);
CREATE INDEX ledger_key ON ledger (account_id, key_id, seq);
CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
`,
  // 11: files and batches (OpenAI's Files and Batch APIs): each record as JSON beside what
  // lists and finds it, a file's bytes in a table of their own, and each finished line of a
  // batch once per custom id.
  `
CREATE TABLE files (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX files_account ON files (account_id, created_at, id);
CREATE TABLE file_contents (
  id TEXT PRIMARY KEY,
  content BLOB NOT NULL
) STRICT;
CREATE TABLE batches (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  done INTEGER NOT NULL,
  rev INTEGER NOT NULL,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX batches_account ON batches (account_id, created_at, id);
CREATE INDEX batches_running ON batches (done);
CREATE TABLE batch_lines (
  batch_id TEXT NOT NULL,
  custom_id TEXT NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (batch_id, custom_id)
) STRICT, WITHOUT ROWID;
`,
  // 12: what each key's holds hold, kept by triggers as holds come, go and change, so that a
  // hold's check reads a total (less the few holds expired and not yet swept) instead of
  // summing every open hold of its account: an account with a 50,000-line batch has as many,
  // and the sum ran, blocking the process, for every hold placed.
  `
CREATE TABLE hold_totals (
  account_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  amount INTEGER NOT NULL,
  PRIMARY KEY (account_id, key_id)
) STRICT, WITHOUT ROWID;
INSERT INTO hold_totals (account_id, key_id, amount)
  SELECT account_id, key_id, sum(amount) FROM holds GROUP BY account_id, key_id;
CREATE TRIGGER hold_totals_insert AFTER INSERT ON holds BEGIN
  INSERT INTO hold_totals (account_id, key_id, amount) VALUES (NEW.account_id, NEW.key_id, NEW.amount)
    ON CONFLICT (account_id, key_id) DO UPDATE SET amount = amount + excluded.amount;
END;
CREATE TRIGGER hold_totals_delete AFTER DELETE ON holds BEGIN
  UPDATE hold_totals SET amount = amount - OLD.amount WHERE account_id = OLD.account_id AND key_id = OLD.key_id;
END;
CREATE TRIGGER hold_totals_update AFTER UPDATE OF account_id, key_id, amount ON holds BEGIN
  UPDATE hold_totals SET amount = amount - OLD.amount WHERE account_id = OLD.account_id AND key_id = OLD.key_id;
  INSERT INTO hold_totals (account_id, key_id, amount) VALUES (NEW.account_id, NEW.key_id, NEW.amount)
    ON CONFLICT (account_id, key_id) DO UPDATE SET amount = amount + excluded.amount;
END;
CREATE INDEX holds_account_expiry ON holds (account_id, expires_at);
`,
];
