import { describe, expect, it } from 'vitest';
import type { JobRecord } from '../../src/stores/types.js';
import { type MakeStores, uid, useHarness } from './harness.js';

function job(overrides: Partial<JobRecord> = {}): JobRecord {
  return {
    id: uid('job'),
    object: 'video',
    accountId: uid('acct'),
    keyId: uid('key'),
    model: 'video-1',
    status: 'queued',
    progress: 0,
    createdAt: 1_700_000_000,
    completedAt: null,
    expiresAt: null,
    error: null,
    result: null,
    prompt: 'a cat',
    seconds: 4,
    size: '1280x720',
    holdId: uid('hold'),
    leaseId: uid('lease'),
    tier: '720P',
    upstreamJobId: null,
    owner: 'instance-a',
    ownerUntil: 1_700_000_000_000,
    ...overrides,
  };
}

/** JobStore: create with TTL, get, compare-and-set update, listUnfinished, listByAccount, compare-and-delete. */
export function jobsSuite(name: string, make: MakeStores): void {
  describe(`${name}: JobStore`, () => {
    const h = useHarness(make);
    const jobs = () => h().stores.jobs;

    it('stores a job and returns copies of it', async () => {
      const j = job({ object: 'image', result: { created: 1, data: [{ url: 'https://x/1.png' }] } });
      await jobs().create(j, 60_000);
      const got = await jobs().get(j.id);
      expect(got).toEqual(j);
      (got as { result: { data: unknown[] } }).result.data.push('mutated');
      got!.status = 'failed';
      expect(await jobs().get(j.id)).toEqual(j);
      expect(await jobs().get(uid('job'))).toBeNull();
    });

    it('stores a job whose text has a lone surrogate, as U+FFFD or as given', async () => {
      // A client's prompt may carry "\ud800" (valid JSON, not Unicode); PostgreSQL's jsonb refuses it.
      const j = job({ object: 'video', result: { prompt: 'a \udc00 b', ['k\ud800']: 1 } });
      await jobs().create(j, 60_000);
      const got = (await jobs().get(j.id)) as unknown as { result: Record<string, unknown> };
      expect(['a \udc00 b', 'a \ufffd b']).toContain(got.result.prompt);
      expect(Object.keys(got.result).sort()).toHaveLength(2);
    });

    it('stores and updates a job whose text from the upstream holds a NUL, as U+FFFD or as given', async () => {
      // PostgreSQL's jsonb refuses NUL: the write failed as a store outage, retried forever, and
      // the job (an image billed, a failed video's hold) never ended.
      const j = job({ object: 'image' });
      await jobs().create(j, 60_000);
      const done = await jobs().update(j.id, { status: 'failed', error: { code: 'upstream_error', message: 'bad prompt\u0000here' } }, ['queued', 'in_progress']);
      expect(done?.status).toBe('failed');
      const got = (await jobs().get(j.id)) as unknown as { error: { message: string } };
      expect(['bad prompt\u0000here', 'bad prompt\ufffdhere']).toContain(got.error.message);
    });

    it('update is a compare-and-set on the status', async () => {
      const j = job();
      await jobs().create(j, 60_000);
      const started = await jobs().update(j.id, { status: 'in_progress', progress: 10 }, ['queued']);
      expect(started).toEqual({ ...j, status: 'in_progress', progress: 10 });
      expect(await jobs().update(j.id, { status: 'in_progress', owner: 'instance-b' }, ['queued'])).toBeNull();
      expect((await jobs().get(j.id))?.owner).toBe('instance-a');

      const done = await jobs().update(
        j.id,
        { status: 'completed', progress: 100, completedAt: 1_700_000_100, result: { url: 'u' } },
        ['queued', 'in_progress'],
      );
      expect(done).toMatchObject({ status: 'completed', progress: 100, result: { url: 'u' } });
      // Without whenStatus any status matches.
      expect(await jobs().update(j.id, { upstreamJobId: 'up-1' })).toMatchObject({ status: 'completed', upstreamJobId: 'up-1' });
      expect(await jobs().get(j.id)).toEqual({ ...done, upstreamJobId: 'up-1' });
      expect(await jobs().update(uid('job'), { status: 'failed' })).toBeNull();
    });

    it('only one of many concurrent compare-and-sets wins', async () => {
      const j = job();
      await jobs().create(j, 60_000);
      const owners = Array.from({ length: 20 }, (_, i) => `instance-${i}`);
      const results = await Promise.all(
        owners.map((owner) => jobs().update(j.id, { status: 'in_progress', owner }, ['queued'])),
      );
      const winners = results.filter((r) => r !== null);
      expect(winners).toHaveLength(1);
      expect((await jobs().get(j.id))?.owner).toBe(winners[0]?.owner);
    });

    it('update is a compare-and-set on the claim too: its owner, and its deadline when given', async () => {
      const j = job({ status: 'in_progress' });
      await jobs().create(j, 60_000);
      const UNFINISHED: JobRecord['status'][] = ['queued', 'in_progress'];
      // Another instance's renewal, and an adoption of a claim read before the last renewal, change nothing.
      expect(await jobs().update(j.id, { ownerUntil: 1_700_000_009_000 }, UNFINISHED, { owner: 'instance-b' })).toBeNull();
      expect(await jobs().update(j.id, { owner: 'instance-b' }, UNFINISHED, { owner: 'instance-a', ownerUntil: 1_699_999_999_000 })).toBeNull();
      expect(await jobs().get(j.id)).toEqual(j);
      // The owner renews; then an adoption of the claim as it now is wins, once.
      const renewed = await jobs().update(j.id, { ownerUntil: 1_700_000_001_000 }, UNFINISHED, { owner: 'instance-a' });
      expect(renewed).toEqual({ ...j, ownerUntil: 1_700_000_001_000 });
      const claim = { owner: 'instance-a', ownerUntil: 1_700_000_001_000 };
      const adoptions = await Promise.all(
        ['instance-b', 'instance-c', 'instance-d'].map((owner) => jobs().update(j.id, { owner, ownerUntil: 1_700_000_002_000 }, UNFINISHED, claim)),
      );
      const won = adoptions.filter((r) => r !== null);
      expect(won).toHaveLength(1);
      expect(await jobs().get(j.id)).toEqual({ ...j, owner: won[0]!.owner, ownerUntil: 1_700_000_002_000 });
      // The old owner, back, cannot renew over the new one.
      expect(await jobs().update(j.id, { ownerUntil: 1_700_000_003_000 }, UNFINISHED, { owner: 'instance-a' })).toBeNull();
      // The status still counts: a finished job is nobody's to renew.
      await jobs().update(j.id, { status: 'completed' });
      expect(await jobs().update(j.id, { ownerUntil: 1_700_000_004_000 }, UNFINISHED, { owner: won[0]!.owner! })).toBeNull();
    });

    it('a job disappears after its TTL, and updates do not extend it', async () => {
      const j = job();
      await jobs().create(j, 300);
      await h().advance(150);
      expect(await jobs().update(j.id, { progress: 50 })).toMatchObject({ progress: 50 });
      expect((await jobs().listUnfinished()).some((x) => x.id === j.id)).toBe(true);
      await h().advance(250);
      expect(await jobs().get(j.id)).toBeNull();
      expect(await jobs().update(j.id, { progress: 60 })).toBeNull();
      expect((await jobs().listUnfinished()).some((x) => x.id === j.id)).toBe(false);
    });

    it('lists the jobs that are neither completed nor failed', async () => {
      const all = [
        job({ status: 'queued' }),
        job({ status: 'in_progress' }),
        job({ status: 'completed' }),
        job({ status: 'failed' }),
      ];
      for (const j of all) await jobs().create(j, 60_000);
      const mine = new Set(all.map((j) => j.id));
      const listed = (await jobs().listUnfinished()).filter((j) => mine.has(j.id));
      expect(listed.map((j) => j.status).sort()).toEqual(['in_progress', 'queued']);

      await jobs().update(all[0]!.id, { status: 'failed', error: { code: 'job_lost', message: 'lost' } });
      const after = (await jobs().listUnfinished()).filter((j) => mine.has(j.id));
      expect(after.map((j) => j.id)).toEqual([all[1]!.id]);
    });

    it("lists one account's jobs of one kind in (createdAt, id) order, paged after a position", async () => {
      const account = uid('acct');
      // Two pairs share a second: the id decides between them, in byte order.
      const specs: Array<[number, string]> = [
        [100, 'video_B'],
        [100, 'video_a'],
        [101, 'video_A'],
        [99, 'video_z'],
        [102, 'video_0'],
        [102, 'video_9'],
      ];
      const made = specs.map(([createdAt, id]) => job({ id: `${id}_${uid('j')}`, accountId: account, createdAt }));
      for (const j of made) await jobs().create(j, 60_000);
      // Neither another account's jobs nor the account's image jobs are listed.
      await jobs().create(job({ accountId: uid('acct'), createdAt: 100 }), 60_000);
      await jobs().create(job({ accountId: account, object: 'image', createdAt: 100 }), 60_000);
      const expected = [...made]
        .sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
        .map((j) => j.id);

      const all = await jobs().listByAccount(account, 'video', { order: 'asc', limit: 100 });
      expect(all.map((j) => j.id)).toEqual(expected);
      expect(all[0]).toEqual(made.find((j) => j.id === expected[0]));
      const desc = await jobs().listByAccount(account, 'video', { order: 'desc', limit: 100 });
      expect(desc.map((j) => j.id)).toEqual([...expected].reverse());

      for (const order of ['asc', 'desc'] as const) {
        const want = order === 'asc' ? expected : [...expected].reverse();
        const seen: string[] = [];
        let after: { createdAt: number; id: string } | undefined;
        for (;;) {
          const page = await jobs().listByAccount(account, 'video', { order, limit: 4, ...(after ? { after } : {}) });
          seen.push(...page.map((j) => j.id));
          const last = page[page.length - 1];
          if (page.length < 4 || !last) break;
          after = { createdAt: last.createdAt, id: last.id };
        }
        expect(seen).toEqual(want);
      }
      expect(await jobs().listByAccount(uid('acct'), 'video', { order: 'asc', limit: 10 })).toEqual([]);
    });

    it('delete is a compare-and-delete on the status; deleted and expired jobs are not listed', async () => {
      const account = uid('acct');
      const running = job({ accountId: account, status: 'in_progress', createdAt: 1 });
      const done = job({ accountId: account, status: 'completed', createdAt: 2 });
      const short = job({ accountId: account, status: 'failed', createdAt: 3 });
      await jobs().create(running, 60_000);
      await jobs().create(done, 60_000);
      await jobs().create(short, 300);

      expect(await jobs().delete(running.id, ['completed', 'failed'])).toBe(false);
      expect(await jobs().get(running.id)).toEqual(running);
      expect(await jobs().delete(done.id, ['completed', 'failed'])).toBe(true);
      expect(await jobs().get(done.id)).toBeNull();
      expect(await jobs().delete(done.id)).toBe(false);
      expect(await jobs().delete(uid('job'))).toBe(false);

      await h().advance(400);
      const listed = await jobs().listByAccount(account, 'video', { order: 'asc', limit: 10 });
      expect(listed.map((j) => j.id)).toEqual([running.id]);
      // Paging after a job that is gone still starts at its place.
      const after = await jobs().listByAccount(account, 'video', { order: 'desc', limit: 10, after: { createdAt: 3, id: short.id } });
      expect(after.map((j) => j.id)).toEqual([running.id]);

      expect(await jobs().delete(running.id)).toBe(true);
      expect((await jobs().listUnfinished()).some((j) => j.id === running.id)).toBe(false);
      expect(await jobs().listByAccount(account, 'video', { order: 'asc', limit: 10 })).toEqual([]);
    });
  });
}
