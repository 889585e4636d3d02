/** What the gateway's batch runner offers the operations (it lives in operations/batches/runner.ts). */
import type { BilledCall } from '../billing/meter.js';
import type { BatchRecord } from '../stores/types.js';

export interface BatchRunner {
  /** Runs a batch this instance just created and holds for (`hold`: the call that placed its hold). */
  start(batch: BatchRecord, hold: BilledCall): void;
  /** Releases a batch's hold (its lines are over, or it was never stored). */
  release(batch: BatchRecord, hold?: BilledCall): Promise<void>;
  /** A batch was asked to stop: the instance running it stops taking lines now, not at its next look. */
  poke(batchId: string): void;
  /** Adopts batches whose instance stopped renewing them (tests; a timer runs it too). */
  sweep(): Promise<void>;
}
