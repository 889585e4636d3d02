/** What the gateway's batch runner offers the operations (it lives in operations/batches/runner.ts). */
import type { BatchRecord } from '../stores/types.js';

export interface BatchRunner {
  /** Runs a batch this instance just created (its lines are held). */
  start(batch: BatchRecord): void;
  /** Releases the holds of these lines of a batch (they will not run). */
  release(batch: BatchRecord, customIds: readonly string[]): Promise<void>;
  /** A batch was asked to stop: the instance running it stops taking lines now, not at its next look. */
  poke(batchId: string): void;
  /** Adopts batches whose instance stopped renewing them (tests; a timer runs it too). */
  sweep(): Promise<void>;
}
