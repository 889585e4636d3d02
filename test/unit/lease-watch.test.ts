import { describe, expect, it } from 'vitest';
import { claimDeadlines, LeaseWatch, MAX_CLOCK_SKEW_MS } from '../../src/jobs/lease-watch.js';

describe('LeaseWatch: a claim lapses when seen unrenewed for one TTL, whatever the clocks', () => {
  it('a claim first seen is not lapsed; unchanged for one TTL of the watcher\'s time, it is', () => {
    let t = 0;
    const watch = new LeaseWatch(1000, () => 0, () => t);
    // A deadline far in the past by any clock: still only a sighting.
    expect(watch.lapsed('job_1', 'gw_a', 5)).toBe(false);
    t = 999;
    expect(watch.lapsed('job_1', 'gw_a', 5)).toBe(false);
    t = 1000;
    expect(watch.lapsed('job_1', 'gw_a', 5)).toBe(true);
  });

  it('a renewal (a new deadline, or a new owner) starts the TTL again', () => {
    let t = 0;
    const watch = new LeaseWatch(1000, () => 0, () => t);
    watch.lapsed('job_1', 'gw_a', 100);
    t = 900;
    expect(watch.lapsed('job_1', 'gw_a', 200)).toBe(false);
    t = 1800;
    expect(watch.lapsed('job_1', 'gw_a', 200)).toBe(false);
    expect(watch.lapsed('job_1', 'gw_b', 200)).toBe(false);
    t = 2799;
    expect(watch.lapsed('job_1', 'gw_b', 200)).toBe(false);
    t = 2800;
    expect(watch.lapsed('job_1', 'gw_b', 200)).toBe(true);
  });

  it('forgets records that are gone: one seen again later counts from then', () => {
    let t = 0;
    const watch = new LeaseWatch(1000, () => 0, () => t);
    watch.lapsed('job_1', 'gw_a', 100);
    watch.lapsed('job_2', 'gw_a', 100);
    watch.keepOnly(new Set(['job_2']));
    t = 5000;
    expect(watch.lapsed('job_1', 'gw_a', 100)).toBe(false);
    expect(watch.lapsed('job_2', 'gw_a', 100)).toBe(true);
  });
});

describe('LeaseWatch: a claim past by more than any sane clock skew and a TTL', () => {
  it('lapsed at once by this clock (a restart adopts long-dead work without a TTL of watching); a nearer one is watched', () => {
    const wall = 10_000_000;
    const watch = new LeaseWatch(1000, () => wall, () => 0);
    expect(watch.lapsed('job_old', 'gw_dead', wall - MAX_CLOCK_SKEW_MS - 1001)).toBe(true);
    // Within the skew a clock may have: a sighting only, whatever the two clocks say.
    expect(watch.lapsed('job_near', 'gw_a', wall - MAX_CLOCK_SKEW_MS)).toBe(false);
  });
});

describe('claimDeadlines', () => {
  it('is the clock plus the TTL, and later than the last one even when the clock stands still or steps back', () => {
    let now = 10_000;
    const next = claimDeadlines(() => now, 3000);
    expect(next()).toBe(13_000);
    expect(next()).toBe(13_001);
    now = 5_000;
    expect(next()).toBe(13_002);
    now = 20_000;
    expect(next()).toBe(23_000);
  });
});
