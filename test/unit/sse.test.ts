import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DONE_EVENT, KEEP_ALIVE, SseParser, encodeEvent } from '../../src/upstream/stream/sse.js';

const enc = new TextEncoder();

/** Feeds `bytes` cut at `cuts` (positions, duplicates give empty slices); returns all events. */
function parseSliced(bytes: Uint8Array, cuts: number[]): string[] {
  const p = new SseParser();
  const points = [0, ...cuts.map((c) => Math.min(c, bytes.length)).sort((a, b) => a - b), bytes.length];
  const out: string[] = [];
  for (let i = 0; i + 1 < points.length; i++) out.push(...p.push(bytes.subarray(points[i]!, points[i + 1]!)));
  out.push(...p.end().events);
  return out;
}

describe('SseParser', () => {
  it('parses data fields, joins multi-line data, drops comments and other fields', () => {
    const text = ': comment\n\ndata: one\n\nevent: x\nid: 5\ndata: two\ndata:three\n\ndata\n\nretry: 10\n\n';
    expect(parseSliced(enc.encode(text), [])).toEqual(['one', 'two\nthree', '']);
  });

  it('accepts LF, CRLF and CR line endings', () => {
    expect(parseSliced(enc.encode('data: a\r\n\r\ndata: b\r\rdata: c\n\n'), [])).toEqual(['a', 'b', 'c']);
  });

  it('a CRLF split by an empty chunk is still one line break', () => {
    const p = new SseParser();
    const out = [
      ...p.push(enc.encode('data: a\r')),
      ...p.push(new Uint8Array(0)),
      ...p.push(enc.encode('\ndata: b\r')),
      ...p.push(new Uint8Array(0)),
      ...p.push(enc.encode('\n\r\n')),
    ];
    expect(out).toEqual(['a\nb']);
  });

  it('a multi-byte character split across chunks arrives whole', () => {
    const bytes = enc.encode('data: h\u00e9llo \u{1F600}\n\n');
    for (let cut = 0; cut <= bytes.length; cut++) expect(parseSliced(bytes, [cut, cut])).toEqual(['h\u00e9llo \u{1F600}']);
  });

  it('an event without its blank line at the end of input is not an event', () => {
    const p = new SseParser();
    expect(p.push(enc.encode('data: whole\n\ndata: cut'))).toEqual(['whole']);
    expect(p.end()).toEqual({ events: [], partial: true });
  });

  it('gives the same events however the bytes are sliced, empty slices included (property)', () => {
    const eventArb = fc.array(fc.string({ unit: 'grapheme', maxLength: 12 }).map((s) => s.replace(/[\r\n]/g, ' ')), {
      minLength: 1,
      maxLength: 3,
    });
    fc.assert(
      fc.property(
        fc.array(eventArb, { maxLength: 6 }),
        fc.constantFrom('\n', '\r\n', '\r'),
        fc.array(fc.nat(400), { maxLength: 12 }),
        (events, eol, cuts) => {
          const text = events.map((lines) => lines.map((l) => `data: ${l}${eol}`).join('') + eol).join('');
          const bytes = enc.encode(text);
          const expected = events.map((lines) => lines.join('\n'));
          expect(parseSliced(bytes, [])).toEqual(expected);
          expect(parseSliced(bytes, cuts)).toEqual(expected);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('frames events, [DONE] and keep-alives in the canonical form', () => {
    const dec = new TextDecoder();
    expect(dec.decode(encodeEvent('{"a":1}'))).toBe('data: {"a":1}\n\n');
    expect(dec.decode(DONE_EVENT)).toBe('data: [DONE]\n\n');
    expect(dec.decode(KEEP_ALIVE)).toBe(': keep-alive\n\n');
  });
});

describe('SseParser on long events', () => {
  it('parses an event read in a thousand pieces once, whole', () => {
    const data = `{"x":"${'é'.repeat(300_000)}"}`;
    const bytes = Buffer.from(`event: delta\r\ndata: ${data}\r\n\r\n`);
    const parser = new SseParser();
    const events: string[] = [];
    const step = Math.ceil(bytes.length / 1000);
    for (let i = 0; i < bytes.length; i += step) events.push(...parser.push(bytes.subarray(i, i + step)));
    expect(events).toEqual([data]);
  });

  it('fails an event past the largest one read; events that end keep it from adding up', () => {
    const parser = new SseParser();
    const small = Buffer.from(`data: ${'a'.repeat(1024 * 1024)}\n\n`);
    // Forty events of a mebibyte each: none is large.
    for (let i = 0; i < 40; i++) expect(parser.push(small)).toHaveLength(1);
    const piece = Buffer.alloc(1024 * 1024, 97);
    parser.push(Buffer.from('data: '));
    expect(() => {
      for (let i = 0; i < 40; i++) parser.push(piece);
    }).toThrow(/larger than 32 MiB/);
  });
});
