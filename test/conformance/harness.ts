import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, expect } from 'vitest';
import type { Stores } from '../../src/stores/types.js';

/**
 * What a store implementation hands the conformance suites. `advance(ms)` lets `ms` pass for
 * the stores: a fake clock moves it (memory), a real one sleeps (Redis). The suites always
 * await it and keep TTLs and windows at 100-300 ms with wide margins, so both work.
 */
export interface StoreHarness {
  stores: Stores;
  advance(ms: number): void | Promise<void>;
  cleanup(): Promise<void>;
}

export type MakeStores = () => Promise<StoreHarness>;

/** How far a real clock may run past the nominal time (sleep overshoot, round trips). */
export const SLACK_MS = 40;

/** A unique id, so suites can share one Redis without colliding. */
export function uid(prefix: string): string {
  return `${prefix}_${randomUUID().replace(/-/g, '').slice(0, 16)}`;
}

/**
 * A fresh harness per test: `const h = useHarness(make)` then `h().stores` inside tests.
 */
export function useHarness(make: MakeStores): () => StoreHarness {
  let current: StoreHarness | undefined;
  beforeEach(async () => {
    current = await make();
  });
  afterEach(async () => {
    await current?.cleanup();
    current = undefined;
  });
  return () => {
    if (!current) throw new Error('harness used outside a test');
    return current;
  };
}

/** A duration measured by the store: exact on a fake clock, at most SLACK_MS short on a real one. */
export function expectAbout(actual: number, expected: number): void {
  expect(actual).toBeGreaterThanOrEqual(expected - SLACK_MS);
  expect(actual).toBeLessThanOrEqual(expected + 2);
}
