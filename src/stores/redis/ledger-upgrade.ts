/**
 * The upgrade of Redis books written before every wallet change was a ledger entry. Those
 * books hold opening balances and top-ups no entry explains, so a balance was not minus the
 * sum of its ledger's costs. Redis has no schema version to migrate at open, so the upgrade
 * runs on first touch: each process starts it when its stores are created and every ledger
 * or wallet read waits for it until it has finished once. It appends to each account whose
 * balance is not minus its ledger's sum one opening-balance credit for the difference (the
 * credit id new accounts' opening balances take, so an account gets one at most), dated at
 * the account's creation. Appended, never inserted: ledger cursors are list positions.
 *
 * Each account is upgraded atomically by a script that writes only if the balance and ledger
 * length are still those the sum was read from (the sum itself is exact bigint arithmetic,
 * here). A marker per account, and one for the whole store once every listed account is
 * done, make it run once however many instances start together; after that a start costs one
 * GET. Wallets of accounts missing from the account index (top-ups before the account was
 * created) are not listed, so not upgraded.
 */
import { creditEntry, creditMarker } from './credits.js';
import { big, int, list, type RedisContext, str } from './connection.js';
import { OPENING_BALANCE_ID, OPENING_BALANCE_REASON } from '../wallet-entries.js';

const CHUNK = 1_000;
/** Accounts upgraded at once. */
const PARALLEL = 16;
/** Attempts per account while its books keep moving under the upgrade. */
const ATTEMPTS = 20;

export class RedisLedgerUpgrade {
  private done = false;
  private running: Promise<void> | null = null;

  constructor(private readonly ctx: RedisContext) {}

  /** Null once the upgrade has finished (no wait), else the run to wait for. */
  ensure(): Promise<void> | null {
    if (this.done) return null;
    this.running ??= this.ctx.run('ledger upgrade', () => this.runOnce()).finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async runOnce(): Promise<void> {
    const { client } = this.ctx;
    const flag = this.ctx.index('ledger-upgraded');
    if ((await client.get(flag)) === null) {
      const ids = list(await client.smembers(this.ctx.index('accounts'))).map((v) => str(v) ?? '');
      for (let i = 0; i < ids.length; i += PARALLEL) {
        await Promise.all(ids.slice(i, i + PARALLEL).map((id) => this.upgradeAccount(id)));
      }
      await client.set(flag, '1');
    }
    this.done = true;
  }

  private async upgradeAccount(accountId: string): Promise<void> {
    const { client } = this.ctx;
    const keys = {
      bal: this.ctx.account(accountId, 'bal'),
      ledger: this.ctx.account(accountId, 'ledger'),
      marker: this.ctx.account(accountId, 'ledger-v2'),
    };
    if ((await client.exists(keys.marker)) === 1) return;
    const createdAt = int(await client.hget(this.ctx.account(accountId, 'acct'), 'createdAt'));
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const balance = str(await client.get(keys.bal)) ?? '0';
      const length = int(await client.llen(keys.ledger));
      let sum = 0n;
      for (let at = 0; at < length; at += CHUNK) {
        const raw = list(await client.lrange(keys.ledger, at, Math.min(at + CHUNK, length) - 1));
        for (const line of raw) sum += big((JSON.parse(str(line) ?? '{}') as { cost?: string }).cost);
      }
      const gap = big(balance) + sum;
      const entry = gap === 0n ? '' : JSON.stringify(creditEntry(accountId, OPENING_BALANCE_ID, gap, OPENING_BALANCE_REASON, createdAt));
      const ok = await this.ctx.scripts.mgLedgerUpgrade(
        [keys.bal, keys.ledger, keys.marker, creditMarker(this.ctx, accountId, OPENING_BALANCE_ID)],
        [balance, length, entry],
      );
      if (int(ok) === 1) return;
    }
    throw new Error(`the books of account ${accountId} kept changing during their upgrade; it runs again on the next read`);
  }
}
