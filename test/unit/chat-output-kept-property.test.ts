// Differential: an event kept by its bytes (copied out of its read, joined to the one before
// it when nothing came between) must count exactly as the same event kept as a string. Reads
// hold several events, are overwritten after they were kept, and are large enough to make the
// store grow; reports, parsed chunks and mid-stream counts come between them.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createStreamOutput } from '../../src/upstream/stream/chat-output.js';

type Op =
  | { k: 'bytes'; texts: string[]; idx: number; pad: number; trash: boolean }
  | { k: 'str'; text: string; idx: number }
  | { k: 'add'; text: string; idx: number }
  | { k: 'report'; completion: number }
  | { k: 'count' }
  | { k: 'after' };

const ev = (text: string, idx: number) => JSON.stringify({ choices: [{ index: idx, delta: { content: text } }] });
const textArb = fc.oneof(fc.string({ maxLength: 6 }), fc.string({ minLength: 500, maxLength: 5000 }), fc.constantFrom('\n\ndata: ', 'data: x', '\u00e9\u4e2d\ud83d\ude00', ''));
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ k: fc.constant('bytes' as const), texts: fc.array(textArb, { minLength: 1, maxLength: 4 }), idx: fc.integer({ min: 0, max: 1 }), pad: fc.integer({ min: 0, max: 3000 }), trash: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('str' as const), text: textArb, idx: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('add' as const), text: textArb, idx: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('report' as const), completion: fc.integer({ min: 0, max: 5 }) }) },
  { weight: 1, arbitrary: fc.constant({ k: 'count' as const }) },
  { weight: 1, arbitrary: fc.constant({ k: 'after' as const }) },
);

function run(ops: Op[], viaBytes: boolean) {
  const o = createStreamOutput();
  const seen: unknown[] = [];
  for (const op of ops) {
    if (op.k === 'bytes') {
      const datas = op.texts.map((t) => ev(t, op.idx));
      const read = Buffer.from(' '.repeat(op.pad) + datas.map((d) => `data: ${d}\n\n`).join(''));
      let pos = op.pad;
      for (const d of datas) {
        const start = pos + 6;
        const end = start + Buffer.byteLength(d);
        if (viaBytes) o.deferBytes(read, start, end);
        else o.defer(read.toString('utf8', start, end));
        pos = end + 2;
      }
      if (op.trash) read.fill(0x41);
    } else if (op.k === 'str') o.defer(ev(op.text, op.idx));
    else if (op.k === 'add') o.add(JSON.parse(ev(op.text, op.idx)));
    else if (op.k === 'report') o.report({ prompt: 3, completion: op.completion } as never);
    else if (op.k === 'count') {
      const c = o.produced().output();
      seen.push(JSON.stringify({ ...c, more: c.more ? [...c.more] : null }));
    } else seen.push(o.produced().outputAfterUsage!());
  }
  const p = o.produced();
  const after = p.outputAfterUsage!();
  const c = p.output();
  seen.push(after, JSON.stringify({ ...c, more: c.more ? [...c.more] : null }), p.usage);
  return seen;
}

describe('chat stream output: events kept as bytes count as events kept as text', () => {
  it('gives the same output, usage and output-after-usage in any order of kept events, reads, reports and counts', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 40 }), (ops) => {
        expect(run(ops, true)).toEqual(run(ops, false));
      }),
      { numRuns: 400 },
    );
  });
});
