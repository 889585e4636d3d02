/**
 * Small pieces of reading an upstream body: a read's parts as one chunk, a look at whether
 * more was buffered this turn, and draining what nobody needs so its connection is reused.
 */

/** A read's parts as one chunk (no copy for one part). */
export const joined = (parts: Uint8Array[]): Uint8Array => (parts.length === 1 ? parts[0]! : Buffer.concat(parts));

/** What Promise.race returns when the upstream had nothing more buffered this turn. */
export const NOT_YET = Symbol('not yet');
export const nextTurn = (): Promise<typeof NOT_YET> => new Promise((resolve) => setImmediate(resolve, NOT_YET));

/** Reads the rest of an upstream body nobody needs, so its connection can go back to the pool. */
export const drainRest = (iterator: AsyncIterator<Uint8Array>): void => {
  void (async () => {
    try {
      while (!(await iterator.next()).done);
    } catch {
      // Failed after the answer was complete: nothing left to bill or tell.
    }
  })();
};
