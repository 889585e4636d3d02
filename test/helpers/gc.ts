/**
 * Whether an object can be collected: forced collections through V8's own `gc`, exposed for
 * this test process only (vitest runs each test file in a process of its own).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/**
 * True once `ref` has cleared under forced collections, false if it survives ten of them. Each
 * waits a timer first: a WeakRef dereferenced in this turn is kept alive until the turn ends.
 */
export async function collected(ref: WeakRef<object>): Promise<boolean> {
  for (let i = 0; i < 10 && ref.deref() !== undefined; i++) {
    await new Promise((r) => setTimeout(r, 5));
    gc();
  }
  return ref.deref() === undefined;
}
