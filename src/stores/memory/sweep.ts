/**
 * Lazy housekeeping for the memory stores: `sweep` runs at most once per `intervalMs` of the
 * store's clock, piggybacking on ordinary calls. No timer, so nothing keeps the process alive
 * and a fake clock drives it in tests.
 */
export function createSweeper(now: () => number, intervalMs: number, sweep: (t: number) => void): () => void {
  let last = now();
  return () => {
    const t = now();
    if (t - last < intervalMs) return;
    last = t;
    sweep(t);
  };
}
