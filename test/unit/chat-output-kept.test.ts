import { describe, expect, it } from 'vitest';
import { outputSize } from '../../src/billing/output.js';
import { createStreamOutput } from '../../src/upstream/stream/chat-output.js';

const usage = { prompt: 3, completion: 2 } as never;
const event = (text: string) => JSON.stringify({ choices: [{ index: 0, delta: { content: text } }] });

/** Each event's data in a read of its own, as `data: ...\n\n`: what the fast path defers. */
function deferInOwnRead(output: ReturnType<typeof createStreamOutput>, data: string): Buffer {
  const read = Buffer.from(`data: ${data}\n\n`);
  output.deferBytes(read, 6, 6 + Buffer.byteLength(data));
  return read;
}

describe('chat stream output: events kept unparsed', () => {
  it('keeps the bytes, not the reads: a read overwritten after it was deferred counts as it came', () => {
    const output = createStreamOutput();
    const first = deferInOwnRead(output, event('Hello'));
    first.fill(0x20);
    deferInOwnRead(output, event(' world'));
    const produced = output.produced();
    expect(produced.usage).toBeNull();
    // "Hello" and " world": 11 characters of text, whatever became of the first read.
    expect(outputSize(produced.output())).toBe(11);
  });

  it('tells the events after a usage report from those before it, when both were kept in a row', () => {
    const output = createStreamOutput();
    deferInOwnRead(output, event('Hello'));
    output.report(usage);
    deferInOwnRead(output, event(' world'));
    // Output came after the report: it did not count it, so it is not final.
    expect(output.produced().outputAfterUsage!()).toBe(true);
  });

  it('keeps many events in one store: a long answer counts every event', () => {
    const output = createStreamOutput();
    for (let i = 0; i < 500; i++) deferInOwnRead(output, event('ab'));
    expect(outputSize(output.produced().output())).toBe(1000);
  });
});
