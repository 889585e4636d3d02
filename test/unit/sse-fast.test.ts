/**
 * The SSE byte fast path: events found by byte search, marks (usage, error, the upstream key)
 * searched once per chunk. Whatever the chunking, every event reaches the callback whole, in
 * order, told exactly whether it holds a mark, and the verbatim bytes sent are the input's.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SseFastPath } from '../../src/upstream/stream/sse-fast.js';
import { split } from '../helpers/split.js';

const MARKS = ['"usage"', '"error"', 'sk-upstream-secret'].map((m) => Buffer.from(m));
const pieces = ['{"a":1}', '"usage"', '"error"', 'sk-upstream-secret', 'sk-upstream', '"usa', 'ge"', 'x', ' ', 'é', '{', '}'];

/** One event's data: a line of random pieces (no newline, no CR). */
const dataArb = fc.array(fc.constantFrom(...pieces), { minLength: 1, maxLength: 6 }).map((p) => p.join(''));

describe('SseFastPath', () => {
  it('hands every canonical event over whole, says exactly which hold a mark, and forwards verbatim bytes unchanged (property)', () => {
    fc.assert(
      fc.property(fc.array(dataArb, { minLength: 1, maxLength: 12 }), fc.array(fc.nat(), { maxLength: 8 }), fc.boolean(), (events, cuts, withDone) => {
        const input = Buffer.from(events.map((d) => `data: ${d}\n\n`).join('') + (withDone ? 'data: [DONE]\n\n' : ''));
        const fast = new SseFastPath(MARKS);
        const seen: Array<{ data: string; marked: boolean }> = [];
        const sent: Buffer[] = [];
        let done = false;
        let framed = false;
        for (const chunk of split(input, cuts)) {
          const r = fast.push(chunk, (buf, start, end, marked) => {
            seen.push({ data: buf.toString('utf8', start, end), marked });
            return 'verbatim';
          });
          expect(r.rest).toBeNull();
          sent.push(...r.out.map((b) => Buffer.from(b)));
          if (r.done) {
            done = true;
            framed = r.doneFramed === true;
            break;
          }
        }
        expect(seen).toEqual(events.map((data) => ({ data, marked: MARKS.some((m) => Buffer.from(data).includes(m)) })));
        // [DONE]'s own bytes end the last part when a verbatim event came right before it in its read.
        expect(Buffer.concat(sent).toString('utf8')).toBe(events.map((d) => `data: ${d}\n\n`).join('') + (framed ? 'data: [DONE]\n\n' : ''));
        expect(done).toBe(withDone);
        if (!withDone) expect(fast.takePending()).toBeNull();
      }),
      { numRuns: 500 },
    );
  });

  it('steps over blank lines before, between and after events, however the reads cut them (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(dataArb, fc.nat({ max: 3 })), { minLength: 1, maxLength: 8 }), fc.nat({ max: 3 }), fc.array(fc.nat(), { maxLength: 8 }), (events, lead, cuts) => {
        // Each event followed by 0 to 3 extra blank lines, the stream opened by as many.
        const input = Buffer.from('\n'.repeat(lead) + events.map(([d, extra]) => `data: ${d}\n\n${'\n'.repeat(extra)}`).join('') + 'data: [DONE]\n\n');
        const fast = new SseFastPath(MARKS);
        const seen: string[] = [];
        let done = false;
        for (const chunk of split(input, cuts)) {
          const r = fast.push(chunk, (buf, start, end) => {
            seen.push(buf.toString('utf8', start, end));
            return 'verbatim';
          });
          expect(r.rest).toBeNull();
          if (r.done) {
            done = true;
            break;
          }
        }
        expect(seen).toEqual(events.map(([d]) => d));
        expect(done).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('ends the run of verbatim events before [DONE] with [DONE] itself: one part, the read as it came', () => {
    const input = Buffer.from('data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n');
    const r = new SseFastPath(MARKS).push(input, () => 'verbatim');
    expect(r).toMatchObject({ done: true, doneFramed: true, rest: null });
    expect(r.out).toHaveLength(1);
    expect(Buffer.from(r.out[0]!).equals(input)).toBe(true);
    // A dropped event before it breaks the run: [DONE] is then left to the caller.
    const dropped = new SseFastPath(MARKS).push(input, (buf, start) => (buf[start + 2] === 98 ? null : 'verbatim'));
    expect(dropped).toMatchObject({ done: true, doneFramed: false });
    expect(Buffer.concat(dropped.out.map((b) => Buffer.from(b))).toString()).toBe('data: {"a":1}\n\n');
  });

  it('hands the rest to the generic parser at the first event that is not canonical', () => {
    for (const odd of ['data: a\ndata: b\n\n', ': comment\n\n', 'event: x\ndata: y\n\n', 'data: a\r\n\r\n']) {
      const fast = new SseFastPath(MARKS);
      const seen: string[] = [];
      const r = fast.push(Buffer.from(`data: {"ok":1}\n\n${odd}data: {"after":1}\n\n`), (buf, start, end) => {
        seen.push(buf.toString('utf8', start, end));
        return 'verbatim';
      });
      expect(seen).toEqual(['{"ok":1}']);
      expect(Buffer.from(r.rest!).toString()).toBe(`${odd}data: {"after":1}\n\n`);
    }
  });

  it('matches a mark byte for byte, whatever characters it holds (none is a pattern), multi-byte ones included', () => {
    const key = 'sk.a+b$(c)|[d]\\e^é*?{2}/';
    const fast = new SseFastPath([Buffer.from(key)]);
    const seen: Array<[string, boolean]> = [];
    const events = [`{"k":"${key}"}`, '{"k":"skXa+b$(c)|[d]\\e^é*?{2}/"}', '{"k":"sk.aab$(c)"}', '{"k":"sk.a+b$(c)|[d]\\e^e*?{2}/"}', `${key}`];
    fast.push(Buffer.from(events.map((d) => `data: ${d}\n\n`).join('')), (buf, start, end, marked) => {
      seen.push([buf.toString('utf8', start, end), marked]);
      return 'verbatim';
    });
    expect(seen).toEqual(events.map((d, i) => [d, i === 0 || i === 4]));
  });
});

describe('SseFastPath on long events', () => {
  it('hands over an event read in a thousand pieces whole, once', () => {
    const data = `{"x":"${'é'.repeat(300_000)}"}`;
    const bytes = Buffer.from(`data: ${data}\n\ndata: [DONE]\n\n`);
    const fast = new SseFastPath(MARKS);
    const seen: string[] = [];
    const step = Math.ceil(bytes.length / 1000);
    for (let i = 0; i < bytes.length; i += step) {
      fast.push(bytes.subarray(i, i + step), (buf, start, end) => {
        seen.push(buf.toString('utf8', start, end));
        return 'verbatim';
      });
    }
    expect(seen).toEqual([data]);
  });

  it('fails an event past the largest one read (an upstream that never ends it), whatever the pieces', () => {
    const fast = new SseFastPath(MARKS);
    const piece = Buffer.alloc(1024 * 1024, 97);
    fast.push(Buffer.from('data: {"x":"'), () => 'verbatim');
    expect(() => {
      for (let i = 0; i < 40; i++) fast.push(piece, () => 'verbatim');
    }).toThrow(/larger than 32 MiB/);
  });
});
