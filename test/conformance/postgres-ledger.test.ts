/**
 * PostgreSQL books written before every wallet change was a ledger entry: migration 7 gives
 * each wallet its ledger does not explain one opening-balance credit for the difference.
 */
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { MIGRATIONS } from '../../src/stores/postgres/migrations.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';

const SCHEMA = freshSchema();
const unreachable = await postgresProblem(POSTGRES_URL);
if (unreachable !== null && process.env.CI !== 'true') console.warn(`\n!!! SKIPPING the PostgreSQL ledger upgrade test: ${unreachable}\n`);

describe.runIf(unreachable === null || process.env.CI === 'true')('postgres: the ledger upgrade (migration 7)', () => {
  afterAll(() => dropSchema(SCHEMA));

  it('a schema-6 database gets an opening-balance entry for what its ledger does not explain', async () => {
    const sql = postgres(POSTGRES_URL, { max: 1, onnotice: () => {} });
    const s = `"${SCHEMA}"`;
    try {
      await sql.unsafe(`CREATE SCHEMA ${s}`);
      await sql.unsafe(`CREATE TABLE ${s}.schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
      for (const [i, m] of MIGRATIONS.slice(0, 6).entries()) {
        await sql.unsafe(m(s, SCHEMA)).simple();
        await sql.unsafe(`INSERT INTO ${s}.schema_migrations (version) VALUES ($1)`, [i + 1]);
      }
      // Schema 6's books: created with 2 USD and topped up 1 USD (no entries), credited 3.25 USD
      // and charged 0.5 USD (entries); a wallet its ledger explains; a wallet with no account.
      await sql.unsafe(`SELECT ${s}.mg_create_account('acct', '[]'::jsonb, 1234, 2000000000)`);
      await sql.unsafe(`UPDATE ${s}.wallets SET balance = balance + 1000000000 WHERE account_id = 'acct'`);
      await sql.unsafe(`SELECT * FROM ${s}.mg_credit('acct', 'c1', 3250000000, '{"kind":"credit","reason":"gift"}'::jsonb, 5)`);
      const charge = (account: string, hold: string, cost: number) =>
        sql.unsafe(
          `WITH w AS (UPDATE ${s}.wallets SET balance = balance - $3::bigint WHERE account_id = $1)
           INSERT INTO ${s}.ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
           VALUES ($1, $2, $2, 'key_1', 'm', '{"kind":"tokens","prompt":1,"completion":1}', $3::bigint, 0, true, 'usage', NULL, 6, 6)`,
          [account, hold, cost],
        );
      await charge('acct', 'h1', 500_000_000);
      await sql.unsafe(`INSERT INTO ${s}.wallets (account_id, balance) VALUES ('even', 0), ('orphan', 40)`);
      await charge('even', 'h2', 7);
    } finally {
      await sql.end();
    }

    const stores = await createPostgresStores({ url: POSTGRES_URL, schema: SCHEMA, maxConnections: 2 });
    try {
      for (const id of ['acct', 'even', 'orphan']) {
        const sum = (await stores.billing.ledger(id)).reduce((total, e) => total + e.cost, 0n);
        expect(-sum, id).toBe((await stores.billing.wallet(id)).balance);
      }
      const ledger = await stores.billing.ledger('acct');
      expect(ledger.map((e) => e.id)).toEqual(['c1', 'h1', 'opening-balance']);
      expect(ledger[2]).toMatchObject({ cost: -3_000_000_000n, keyId: '', units: { kind: 'credit', reason: 'opening balance' }, at: 1_234 });
      expect((await stores.billing.wallet('acct')).balance).toBe(5_750_000_000n);
      expect(await stores.billing.ledger('even')).toHaveLength(1);
      expect((await stores.billing.keyUsage('acct', 'key_1', '2025-01')).total).toBe(0n);
      // New accounts, after the upgrade: the opening balance is its own entry.
      expect(await stores.accounts.create({ id: 'fresh', grants: [], createdAt: 9 }, 11n)).toBe(true);
      expect((await stores.billing.ledger('fresh')).map((e) => [e.id, e.cost, e.at])).toEqual([['opening-balance', -11n, 9]]);
    } finally {
      await stores.close();
    }
  });
});
