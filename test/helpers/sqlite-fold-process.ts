/**
 * One process on a shared SQLite file, for the cross-process test of `hitAndPlaceHold` (each
 * process counts its own rate window; the holds share the file's wallet): waits until
 * `startAt` (unix ms) so every process starts together, then
 * makes `calls` folded hit-and-hold calls and prints one line of JSON: [allowed, held] per call.
 *
 *   node --import tsx test/helpers/sqlite-fold-process.ts <path> <account> <key> <calls> <limit> <amount> <startAt>
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createSqliteStores } from '../../src/stores/sqlite/entry.js';

const [path = '', accountId = '', keyId = '', calls = '0', limit = '0', amount = '0', startAt = '0'] = process.argv.slice(2);
const stores = createSqliteStores({ path });
const fold = stores.billing.hitAndPlaceHold?.bind(stores.billing);
if (!fold) throw new Error('the SQLite billing store has no hitAndPlaceHold');
await sleep(Math.max(0, Number(startAt) - Date.now()));
const out: [boolean, boolean | null][] = [];
for (let i = 0; i < Number(calls); i++) {
  const r = await fold(
    { bucket: `key:${keyId}`, limit: Number(limit), windowMs: 60_000, accountId },
    { holdId: `${process.pid}-${i}`, accountId, keyId, amount: BigInt(amount), monthlyCap: null, month: '2025-01', ttlMs: 60_000 },
  );
  out.push([r.window.allowed, r.hold === null ? null : r.hold.ok]);
}
await stores.close();
process.stdout.write(`${JSON.stringify(out)}\n`);
