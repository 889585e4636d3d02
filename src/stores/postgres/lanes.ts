/**
 * One call in flight per lane (an account's money, a rate bucket's hits) from this process.
 * Operations that arrive while a lane's call runs wait, and go together in its next call, in
 * arrival order. PostgreSQL then sees one transaction per batch instead of one per operation:
 * fifty concurrent calls of one account no longer queue in the database on one row lock
 * (each waiting for the one before to reach disk), and a busy lane's batches grow to absorb
 * its load while an idle lane's operation goes out at once, alone.
 */
import { isStatementError, isUnanswered, type PgContext } from './connection.js';
import { jsonText } from '../json-text.js';

/** The database's reply to a batch: one result per operation, in order. */
export type RunBatch<Op, R> = (lane: string, ops: Op[]) => Promise<R[]>;

interface Waiting<Op, R> {
  op: Op;
  resolve: (r: R) => void;
  reject: (err: unknown) => void;
}

/** At most this many operations in one call: a statement stays short under its timeout. */
export const MAX_BATCH = 256;

export class Lanes<Op, R> {
  private readonly lanes = new Map<string, Waiting<Op, R>[]>();

  /**
   * @param run sends a batch; it must answer one result per operation, in order.
   * @param isolate whether a failed batch's operations should be retried one by one: true for
   *   an error the database raised for the batch's content (one bad operation must not fail
   *   the others), false when the database could not be reached (each would fail again).
   */
  constructor(
    private readonly run: RunBatch<Op, R>,
    private readonly isolate: (err: unknown) => boolean,
  ) {}

  submit(lane: string, op: Op): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const waiting = this.lanes.get(lane);
      if (waiting) {
        waiting.push({ op, resolve, reject });
        return;
      }
      const fresh = [{ op, resolve, reject }];
      this.lanes.set(lane, fresh);
      void this.drain(lane, fresh);
    });
  }

  /** Operations waiting or in flight, over all lanes (the tests read it). */
  get pending(): number {
    let n = 0;
    for (const w of this.lanes.values()) n += w.length;
    return n;
  }

  /** One call for `ops`; a reply that does not answer every operation is an error. */
  private async send(lane: string, ops: Op[]): Promise<R[]> {
    const results = await this.run(lane, ops);
    if (results.length !== ops.length) {
      throw new Error(`a batch of ${ops.length} operations returned ${results.length} results`);
    }
    return results;
  }

  private async drain(lane: string, waiting: Waiting<Op, R>[]): Promise<void> {
    while (waiting.length > 0) {
      const batch = waiting.slice(0, MAX_BATCH);
      try {
        const results = await this.send(
          lane,
          batch.map((w) => w.op),
        );
        for (let i = 0; i < batch.length; i++) (batch[i] as Waiting<Op, R>).resolve(results[i] as R);
      } catch (err) {
        if (batch.length > 1 && this.isolate(err)) {
          for (const w of batch) {
            try {
              const [r] = await this.send(lane, [w.op]);
              w.resolve(r as R);
            } catch (one) {
              w.reject(one);
            }
          }
        } else if (isUnanswered(err)) {
          // The database did not answer within the timeout: those that arrived behind the
          // batch would wait as long again after waiting for it, so they fail now, with it.
          for (const w of waiting.splice(0)) w.reject(err);
          continue;
        } else {
          for (const w of batch) w.reject(err);
        }
      }
      // New arrivals were pushed behind the batch while it ran; they form the next one.
      waiting.splice(0, batch.length);
    }
    this.lanes.delete(lane);
  }
}

/**
 * Lanes whose batch is one call of the schema's PL/pgSQL function `fn(lane, ops jsonb)`,
 * answering a jsonb array with one result per operation. A batch PostgreSQL refused for its
 * content is retried one operation at a time.
 */
export function functionLanes<Op, R>(ctx: PgContext, what: string, fn: string): Lanes<Op, R> {
  const text = `SELECT ${ctx.s}.${fn}($1, $2::text::jsonb) AS out`;
  return new Lanes<Op, R>(
    (lane, ops) => ctx.one<{ out: R[] }>(what, text, [lane, jsonText(ops)]).then((r) => r?.out ?? []),
    isStatementError,
  );
}
