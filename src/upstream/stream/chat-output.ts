/**
 * What a chat stream produced, for its bill: the upstream's usage when it sent it, else the
 * text of every choice (for the tokenizer). Events relayed without parsing are parsed only in
 * that second case, or when they came after a usage report (to tell whether it was final).
 */
import { choicesOutput, noOutput, outputSize as sizeOf } from '../../billing/output.js';
import type { Usage } from '../../billing/usage.js';
import type { AnswerAccount as Produced } from '../../billing/answer.js';
import type { OutputCount } from '../../billing/output.js';

export interface StreamOutput {
  /** The upstream's last usage report, once an event carried one. */
  readonly usage: Usage | null;
  /** Adds the text a parsed chunk produced (every kind of output a provider bills). */
  add(chunk: { choices?: unknown }): void;
  /** Records a usage report, after the output of the chunk that carried it was added. */
  report(usage: Usage): void;
  /** Keeps an event relayed unparsed; its text is counted only if usage never arrives. */
  defer(data: string): void;
  /**
   * Keeps the canonical event `data: buf[start..end)` relayed unparsed: its bytes are copied
   * into the stream's one store of such events, and events deferred one after the other are
   * kept as one range there.
   */
  deferBytes(buf: Buffer, start: number, end: number): void;
  /** What the stream produced (the deferred events parsed once, here). */
  produced(): Produced;
}

export function createStreamOutput(): StreamOutput {
  const produced = noOutput();
  /**
   * Events relayed without parsing, in stream order, parsed only if the produced text has to be
   * counted: a string as (data, 0, -1), and byte ranges of `kept` as (RANGE, start, end), a
   * range spanning one event's data or several events' in a row, joined by "\n\ndata: ".
   */
  const unparsed: Array<string | number | { choices?: unknown }> = [];
  /**
   * The bytes of the events kept unparsed, copied out of the reads they came in. Kept as views
   * of their reads, every event held its read's buffer and two objects of its own for as long
   * as the stream lasted: V8's young-generation collections copied them all into the old
   * generation (bench/gc.ts measured a fifth of what a paced stream promotes), and a long answer
   * kept thousands of reads alive. One store outside the heap holds the same bytes.
   */
  let kept: Buffer | null = null;
  let keptLength = 0;
  const reserve = (more: number): Buffer => {
    const need = keptLength + more;
    if (kept && need <= kept.length) return kept;
    const grown = Buffer.allocUnsafeSlow(Math.max(need, 2 * (kept?.length ?? 0), KEPT_FIRST));
    if (kept) kept.copy(grown, 0, 0, keptLength);
    return (kept = grown);
  };
  let usage: Usage | null = null;
  /**
   * Whether output came after the last usage report. An upstream may report usage before its
   * output (an opening report with completion 0); such a report did not count what followed,
   * and is not final even when the stream completes. Parsed events tell at once; events kept
   * unparsed tell when they are parsed: those from `unparsedAfterUsage` on came after it.
   */
  let outputAfterUsage = false;
  let unparsedAfterUsage = 0;
  /** Set while deferred events are parsed: they say nothing of their place by being added now. */
  let replaying = false;

  const output: StreamOutput = {
    get usage() {
      return usage;
    },
    add(chunk) {
      if (!replaying && unparsed.length !== 0) {
        // Kept in its place after the events not parsed yet, so that the produced text, if it
        // is ever counted, is in stream order (a boundary between two texts changes a count).
        unparsed.push(chunk, 0, PARSED);
        if (usage && !outputAfterUsage) {
          const own = noOutput();
          choicesOutput(chunk?.choices, own);
          if (sizeOf(own) > 0) outputAfterUsage = true;
        }
        return;
      }
      const before = sizeOf(produced);
      choicesOutput(chunk?.choices, produced);
      if (usage && !replaying && sizeOf(produced) > before) outputAfterUsage = true;
    },
    report(u) {
      usage = u;
      outputAfterUsage = false;
      unparsedAfterUsage = unparsed.length;
    },
    defer(data) {
      unparsed.push(data, 0, -1);
    },
    deferBytes(buf, start, end) {
      const n = unparsed.length;
      // Right after the last range (nothing else was kept since, and no usage was reported in
      // between: the events after a report are told apart by their place): joined to it as the
      // stream writes two events, so the range is split back into the same events.
      if (n !== 0 && unparsed[n - 3] === RANGE && unparsed[n - 1] === keptLength && unparsedAfterUsage !== n) {
        const store = reserve(JOIN.length + end - start);
        keptLength += JOIN.copy(store, keptLength);
        keptLength += buf.copy(store, keptLength, start, end);
        unparsed[n - 1] = keptLength;
        return;
      }
      const store = reserve(end - start);
      unparsed.push(RANGE, keptLength, keptLength + (end - start));
      keptLength += buf.copy(store, keptLength, start, end);
    },
    produced: () => ({
      usage,
      output: counted,
      outputAfterUsage: () => {
        // Only events after the report are parsed here: usually none (the usage came last).
        if (usage && !outputAfterUsage && unparsed.length > unparsedAfterUsage) counted();
        return usage !== null && outputAfterUsage;
      },
    }),
  };
  /** The produced text, with every event kept unparsed parsed now (once). */
  function counted(): OutputCount {
    // A canonical event's data is one line, so "\n\ndata: " inside a range only ever joins two.
    // Each event with whether it came after the last usage report.
    const events: Array<[string | { choices?: unknown }, boolean]> = [];
    for (let i = 0; i < unparsed.length; i += 3) {
      const item = unparsed[i] as string | { choices?: unknown };
      const after = usage !== null && i >= unparsedAfterUsage;
      if (item !== RANGE) events.push([item, after]);
      else for (const data of kept!.toString('utf8', unparsed[i + 1] as number, unparsed[i + 2] as number).split(JOIN_TEXT)) events.push([data, after]);
    }
    unparsed.length = 0;
    unparsedAfterUsage = 0;
    keptLength = 0;
    replaying = true;
    try {
      for (const [data, after] of events) {
        const before = sizeOf(produced);
        try {
          output.add(typeof data === 'string' ? (JSON.parse(data) as { choices?: unknown }) : data);
        } catch {
          // Relayed as it came; it carries nothing countable.
        }
        if (after && sizeOf(produced) > before) outputAfterUsage = true;
      }
    } finally {
      replaying = false;
    }
    return produced;
  }
  return output;
}

/** The end mark of a chunk parsed already, kept in the queue of the unparsed ones. */
const PARSED = -2;
/** The mark of a range of `kept` in the queue of the unparsed events (no chunk is this object). */
const RANGE: { choices?: unknown } = Object.freeze({});
/** What joins two events' data in a stream, and in a kept range (split on it to read them back). */
const JOIN_TEXT = '\n\ndata: ';
const JOIN = Buffer.from(JOIN_TEXT);
/** The first size of a stream's store of unparsed events (about a dozen chat chunks). */
const KEPT_FIRST = 2048;
