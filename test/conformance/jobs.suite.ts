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

/** JobStore: create with TTL, get, compare-and-set update, listUnfinished. */
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
  });
}
