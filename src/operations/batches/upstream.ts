/** Placeholder replaced by the upstream Batch API path. */
import type { Services } from '../../services.js';
import type { BatchRecord } from '../../stores/types.js';
import type { BatchInputLine } from './input.js';

export async function runUpstreamBatch(_core: Services, _run: { batch: BatchRecord; stopping(): Promise<boolean> }, _lines: BatchInputLine[], _seen: (b: BatchRecord) => void): Promise<void> {
  throw new Error('not yet');
}
