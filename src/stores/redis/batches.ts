/**
 * Per-call operations (a window hit, a hold, a settle, a release, a lease) go to Redis in
 * batches, with at most one batch in flight at a time.
 *
 * An operation issued while nothing is in flight waits only until process.nextTick, so that
 * the others issued in the same turn (and the continuations of one answer) go with it. What
 * is issued while a batch is out waits for every answer of that batch, then all of it goes
 * out together as the next batch, in the order it came. Within a batch the operations that
 * share a hash tag (one account, one rate bucket) go as one group: the sender runs a group of
 * one as its own script and a larger group as one mgBatch script, one after another, as if
 * each had been sent alone. Under load a round trip then carries the operations of many
 * calls, and one script start in Redis and one command in the gateway serve a whole group;
 * the price is that an operation may wait for one round trip before it goes.
 */

/** One operation: a per-call script, its keys (all under one hash tag) and its arguments. */
export interface BatchOp<Name extends string = string> {
  what: string;
  script: Name;
  keys: readonly string[];
  args: readonly (string | number)[];
}

/**
 * Sends one group (operations of one hash tag, in order). It answers one entry per operation:
 * the operation's reply, or an Error for an operation that failed alone. A rejection fails
 * every operation of the group with that error.
 */
export type SendGroup<Name extends string> = (ops: BatchOp<Name>[]) => Promise<unknown[]>;

/** At most this many operations in one group: a script that blocks Redis stays short. */
export const MAX_GROUP = 128;

interface Waiting<Name extends string> {
  op: BatchOp<Name>;
  resolve: (v: unknown) => void;
  reject: (err: unknown) => void;
}

/** The hash tag of a key: what lies between its first "{" and the next "}" (or the whole key). */
export function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  if (open < 0) return key;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

export class Batches<Name extends string> {
  /** Operations issued and not yet sent, in the order they came. */
  private pending: Waiting<Name>[] = [];
  /** Groups of the batch in flight that have not been answered yet. */
  private inFlight = 0;
  /** Which batch is in flight: answers of a batch given up no longer count. */
  private batchNo = 0;
  private scheduled = false;

  constructor(private readonly send: SendGroup<Name>) {}

  submit(op: BatchOp<Name>): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.pending.push({ op, resolve, reject });
      this.schedule();
    });
  }

  /**
   * Stops waiting for the batch in flight (its connection closed, so it may never be
   * answered): what waits behind it goes now. Answers that still come are delivered.
   */
  giveUp(): void {
    this.batchNo++;
    this.inFlight = 0;
    this.schedule();
  }

  /**
   * Sends what is waiting now, if nothing is in flight, instead of at process.nextTick. An
   * operation outside the batches calls it first, so that it never overtakes one issued
   * before it while the connection was idle: a client that was answered after its settle was
   * issued reads its charge on the next request.
   */
  flushNow(): void {
    if (this.scheduled && this.inFlight === 0) this.flush();
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight > 0 || this.pending.length === 0) return;
    this.scheduled = true;
    process.nextTick(this.flush);
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.inFlight > 0 || this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    // Groups in the order their first operation came; a full group is closed, and the next
    // operation of its tag starts another one, sent after it.
    const groups: Waiting<Name>[][] = [];
    const open = new Map<string, Waiting<Name>[]>();
    for (const w of batch) {
      const tag = hashTagOf(w.op.keys[0] ?? '');
      let g = open.get(tag);
      if (!g || g.length === MAX_GROUP) {
        g = [];
        open.set(tag, g);
        groups.push(g);
      }
      g.push(w);
    }
    const no = this.batchNo;
    this.inFlight = groups.length;
    for (const g of groups) this.sendGroup(g, no);
  };

  private sendGroup(group: Waiting<Name>[], no: number): void {
    const answered = () => {
      if (no === this.batchNo && --this.inFlight === 0) this.schedule();
    };
    let sent: Promise<unknown[]>;
    try {
      sent = this.send(group.map((w) => w.op));
    } catch (err) {
      sent = Promise.reject(err);
    }
    sent.then(
      (replies) => {
        for (let i = 0; i < group.length; i++) {
          const w = group[i] as Waiting<Name>;
          const r = replies[i];
          if (i >= replies.length) w.reject(new Error(`a group of ${group.length} operations got ${replies.length} replies`));
          else if (r instanceof Error) w.reject(r);
          else w.resolve(r);
        }
        answered();
      },
      (err: unknown) => {
        for (const w of group) w.reject(err);
        answered();
      },
    );
  }
}
