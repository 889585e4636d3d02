/**
 * What a chat stream produced, for its bill: the upstream's usage when it sent it, else the
 * text of every choice (for the tokenizer). Events relayed without parsing are parsed only in
 * that second case.
 */
import { choicesOutput, noOutput } from '../../billing/output.js';
import type { Usage } from '../../billing/usage.js';
import type { Produced } from './reader.js';
import type { OutputCount } from '../../billing/output.js';

export interface StreamOutput {
  /** The upstream's usage, once an event carried it. */
  usage: Usage | null;
  /** Adds the text a parsed chunk produced (every kind of output a provider bills). */
  add(chunk: { choices?: unknown }): void;
  /** Keeps an event relayed unparsed; its text is counted only if usage never arrives. */
  defer(data: string): void;
  /**
   * Keeps the canonical event `data: buf[start..end)` relayed unparsed, without copying or
   * slicing: a run of such events back to back in one read is kept as one range.
   */
  deferBytes(buf: Buffer, start: number, end: number): void;
  /** What the stream produced (the deferred events parsed once, here). */
  produced(): Produced;
}

export function createStreamOutput(): StreamOutput {
  const produced = noOutput();
  /**
   * Events relayed without parsing, in stream order, parsed only if the produced text has to be
   * counted: a string as (data, 0, -1), and byte ranges as (buffer, start, end), a range
   * spanning one event's data or several events' back to back, joined by "\n\ndata: ".
   */
  const unparsed: Array<Buffer | string | number> = [];

  const output: StreamOutput = {
    usage: null,
    add(chunk) {
      choicesOutput(chunk?.choices, produced);
    },
    defer(data) {
      unparsed.push(data, 0, -1);
    },
    deferBytes(buf, start, end) {
      const n = unparsed.length;
      // The next event of the same read: "\n\ndata: " (8 bytes) after the last one's data.
      if (n !== 0 && unparsed[n - 3] === buf && unparsed[n - 1] === start - 8) unparsed[n - 1] = end;
      else unparsed.push(buf, start, end);
    },
    produced: () => ({ usage: output.usage, output: counted }),
  };
  /** The produced text, with every event kept unparsed parsed now (once). */
  function counted(): OutputCount {
    // A canonical event's data is one line, so "\n\ndata: " inside a range only ever joins two.
    const events: string[] = [];
    for (let i = 0; i < unparsed.length; i += 3) {
      const item = unparsed[i] as Buffer | string;
      if (typeof item === 'string') events.push(item);
      else for (const data of item.toString('utf8', unparsed[i + 1] as number, unparsed[i + 2] as number).split('\n\ndata: ')) events.push(data);
    }
    unparsed.length = 0;
    for (const data of events) {
      try {
        output.add(JSON.parse(data) as { choices?: unknown });
      } catch {
        // Relayed as it came; it carries nothing countable.
      }
    }
    return produced;
  }
  return output;
}
