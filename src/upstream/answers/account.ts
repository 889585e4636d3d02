/**
 * The running account every wire format's stream reader fills: output as it is read, and each
 * usage report with whether output came after it (an opening report, or a running total sent
 * before the rest of the answer, counts nothing that followed it).
 */
import type { AnswerAccount } from '../../billing/answer.js';
import { collectOutput, noOutput, type OutputCount, outputSize as sizeOf } from '../../billing/output.js';
import type { Usage } from '../../billing/usage.js';

export class RunningAccount implements AnswerAccount {
  usage: Usage | null = null;
  private readonly produced = noOutput();
  private after = false;
  private ended = false;
  /** Choices (or candidates) seen that have not finished, and whether any finished. */
  private readonly unfinished = new Set<number>();
  private anyFinished = false;

  /** Adds every output string of `value` (a delta, a content block, a candidate's parts), read by `collect`. */
  add(value: unknown, collect: (value: unknown, into: OutputCount) => unknown = collectOutput): void {
    const before = sizeOf(this.produced);
    collect(value, this.produced);
    if (this.usage && sizeOf(this.produced) > before) this.after = true;
  }

  /** Adds output already counted apart (text, and media bytes). */
  addCount(count: OutputCount): void {
    if (sizeOf(count) === 0) return;
    this.produced.text += count.text;
    this.produced.mediaBytes += count.mediaBytes;
    if (count.more) for (const [i, t] of count.more) (this.produced.more ??= new Map()).set(i, (this.produced.more.get(i) ?? '') + t);
    if (this.usage) this.after = true;
  }

  /** Records a usage report (after the output of the event that carried it was added). */
  report(usage: Usage | null): void {
    if (!usage) return;
    this.usage = usage;
    this.after = false;
  }

  output(): OutputCount {
    return this.produced;
  }

  /** Records that the answer's content ended (a stop reason came): its usage may still follow. */
  protected contentEnded(): void {
    this.ended = true;
  }

  /**
   * Records a choice (or candidate) of an answer that may have several, and whether it
   * finished: the content ended once every one seen has finished, not at the first (a client
   * that leaves while another is still being written pays only what was produced).
   */
  protected choice(index: number, finished: boolean): void {
    if (!finished) {
      this.unfinished.add(index);
      return;
    }
    this.unfinished.delete(index);
    this.anyFinished = true;
  }

  answered(): boolean {
    return this.ended || (this.anyFinished && this.unfinished.size === 0);
  }

  outputAfterUsage(): boolean {
    return this.usage !== null && this.after;
  }
}
