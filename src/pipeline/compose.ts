/**
 * The pipeline: stages in one ordered list, first to last; each stage's `next()` runs the
 * rest, and a stage that awaits `next()` also sees the answer coming back.
 */
import type { Exchange, Stage } from './types.js';

export function compose(stages: ReadonlyArray<Stage | null>): (x: Exchange) => Promise<Response> {
  const list = stages.filter((s): s is Stage => s !== null);
  const at = (i: number, x: Exchange): Promise<Response> => {
    const stage = list[i];
    if (!stage) return Promise.reject(new Error('the pipeline ended without an answer'));
    try {
      return Promise.resolve(stage(x, () => at(i + 1, x)));
    } catch (err) {
      return Promise.reject(err);
    }
  };
  return (x) => at(0, x);
}
