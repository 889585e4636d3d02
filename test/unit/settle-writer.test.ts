/**
 * Settles kept through a store outage: they land as soon as the store answers again (not at
 * their next backoff tick, up to 30 s away), a spend report lands its account's first, and a
 * shutdown with the store still down does not try them one store timeout after another.
 * Over the memory store, behind a switch that makes it refuse as an unreachable store does.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { fileJournal, type SettleJournal } from '../../src/billing/journal.js';
import { SettleWriter } from '../../src/billing/settles.js';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { BillingStore } from '../../src/stores/types.js';
import { settleRequest } from '../helpers/billing.js';

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const cleanup: Array<() => void> = [];
afterEach(() => {
  for (const f of cleanup.splice(0)) f();
});


/**
 * The memory billing store behind an outage switch, counting the settles it was asked for;
 * `downFor` makes only one account's settles fail (a shard of the store down).
 */
function switchedStore() {
  const real = createMemoryStores().billing;
  const state = { down: false, downFor: null as string | null, settleCalls: 0, refusedFor: 0 };
  const billing = new Proxy(real, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        if (prop === 'settle') state.settleCalls++;
        const account = (args[0] as { accountId?: string } | undefined)?.accountId;
        if (prop === 'settle' && state.downFor !== null && account === state.downFor) {
          state.refusedFor++;
          return Promise.reject(new StoreUnavailableError('shard down (test switch)'));
        }
        if (state.down) return Promise.reject(new StoreUnavailableError('store down (test switch)'));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as BillingStore;
  return { billing, real, state };
}

function writerOn(billing: BillingStore): { writer: SettleWriter; journal: SettleJournal } {
  const dir = mkdtempSync(join(tmpdir(), 'mg-settle-writer-'));
  const journal = fileJournal(dir);
  const writer = new SettleWriter(billing, journal, quiet, undefined);
  cleanup.push(() => {
    journal.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { writer, journal };
}

const spent = async (real: BillingStore) => (await real.keyUsage('acct', 'key', '2026-11')).total;

describe('settles kept through a store outage', () => {
  it('land as soon as the store takes a new settle, not at their next backoff tick', async () => {
    const { billing, real, state } = switchedStore();
    const { writer } = writerOn(billing);
    state.down = true;
    for (const [i, cost] of [10n, 20n, 30n].entries()) await writer.write(settleRequest(`h${i}`, cost));
    expect(writer.pending()).toBe(3);
    // Long enough down for the backoff to pass a second between tries.
    await sleep(2_000);
    state.down = false;
    await writer.write(settleRequest('h-new', 1n));
    await sleep(150);
    expect(writer.pending()).toBe(0);
    expect(await spent(real)).toBe(61n);
  }, 10_000);

  it('are landed for their account before a spend report is read', async () => {
    const { billing, real, state } = switchedStore();
    const { writer } = writerOn(billing);
    state.down = true;
    await writer.write(settleRequest('h1', 5n));
    await sleep(1_600);
    state.down = false;
    await writer.landFor('acct');
    expect(await spent(real)).toBe(5n);
    expect(writer.pending()).toBe(0);
  }, 10_000);

  it('at shutdown with the store still down: one try, not one per settle; all stay journaled', async () => {
    const { billing, state } = switchedStore();
    const { writer, journal } = writerOn(billing);
    state.down = true;
    for (let i = 0; i < 12; i++) await writer.write(settleRequest(`h${i}`, 1n));
    const before = state.settleCalls;
    await writer.dispose();
    expect(state.settleCalls - before).toBe(1);
    expect(journal.entries()).toHaveLength(12);
  });

  it('at shutdown with the store back: every kept settle lands', async () => {
    const { billing, real, state } = switchedStore();
    const { writer, journal } = writerOn(billing);
    state.down = true;
    for (let i = 0; i < 5; i++) await writer.write(settleRequest(`h${i}`, 2n));
    state.down = false;
    await writer.dispose();
    expect(await spent(real)).toBe(10n);
    expect(journal.entries()).toHaveLength(0);
  });

  it('replayed at start are kept from the first moment: a release of their holds leaves them be until they land', async () => {
    const { billing, real, state } = switchedStore();
    const dir = mkdtempSync(join(tmpdir(), 'mg-settle-writer-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const first = new SettleWriter(billing, fileJournal(dir), quiet, undefined);
    state.down = true;
    await first.write(settleRequest('h-replayed', 7n));
    await first.dispose();
    // The next start replays it: kept (a release would otherwise close its hold first) while
    // the store is asked, and after the store refused it.
    const journal = fileJournal(dir);
    cleanup.push(() => journal.close());
    const next = new SettleWriter(billing, journal, quiet, undefined);
    expect(next.keeps('acct', 'h-replayed')).toBe(true);
    await sleep(50);
    expect(next.keeps('acct', 'h-replayed')).toBe(true);
    state.down = false;
    await next.landFor('acct');
    await sleep(200);
    expect(next.keeps('acct', 'h-replayed')).toBe(false);
    expect(await spent(real)).toBe(7n);
  }, 10_000);

  it("with one part of the store still down, the others' settles do not set its kept ones trying again each time", async () => {
    const { billing, state } = switchedStore();
    const { writer } = writerOn(billing);
    state.downFor = 'shard-b';
    for (let i = 0; i < 20; i++) await writer.write({ ...settleRequest(`b${i}`, 1n), accountId: 'shard-b' });
    expect(writer.pending()).toBe(20);
    const before = state.refusedFor;
    for (let i = 0; i < 200; i++) await writer.write(settleRequest(`a${i}`, 1n));
    await sleep(50);
    // One wake (20 tries) and their own backoff, not 20 tries per settle taken (4,000).
    expect(state.refusedFor - before).toBeLessThanOrEqual(60);
    expect(writer.pending()).toBe(20);
  });
});
