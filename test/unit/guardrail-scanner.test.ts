/**
 * The output guardrails' stream scanner: however a text is cut into deltas, what it releases
 * is what the whole text redacted at once gives, a match split across deltas included, and a
 * block releases only the text before its match. Spans of regular expressions are computed
 * from their source, and an unbounded one takes the configured bound.
 */
import { describe, expect, it } from 'vitest';
import { compileGuardrail } from '../../src/guardrails/guardrail.js';
import { type OutputFinder, scanWhole, TextScanner } from '../../src/guardrails/scanner.js';
import { regexSpan } from '../../src/guardrails/span.js';
import { guardrailSchema } from '../../src/options/guardrails.js';

function finders(...configs: unknown[]): OutputFinder[] {
  return configs.flatMap((c) => {
    const g = compileGuardrail(guardrailSchema.parse(c));
    return g.finders.map((f) => ({ ...f, guardrail: g.id, block: g.action === 'block' }));
  });
}

const PII = finders({ id: 'pii', kind: 'pii', on: ['output'], action: 'redact' });
const TEXT = 'Mail jane.doe@example.com or call +1 415 555 0100; card 4111 1111 1111 1111, ssn 123-45-6789 at 10.0.0.1. Done.';
const WHOLE = 'Mail [REDACTED:EMAIL] or call [REDACTED:PHONE]; card [REDACTED:CREDIT_CARD], ssn [REDACTED:SSN] at [REDACTED:IP_ADDRESS]. Done.';

function streamed(fs: OutputFinder[], parts: string[]): { out: string; blocked: string | null } {
  const s = new TextScanner(fs);
  let out = '';
  for (const p of parts) out += s.push(p);
  out += s.flush();
  return { out, blocked: s.blocked };
}

describe('the stream scanner', () => {
  it('redacts the whole text like the plain answer does', () => {
    expect(scanWhole(PII, TEXT).text).toBe(WHOLE);
  });

  it('catches a match split across any two or three deltas', () => {
    for (let i = 1; i < TEXT.length; i++) {
      expect(streamed(PII, [TEXT.slice(0, i), TEXT.slice(i)]).out).toBe(WHOLE);
      const j = Math.min(TEXT.length - 1, i + 7);
      expect(streamed(PII, [TEXT.slice(0, i), TEXT.slice(i, j), TEXT.slice(j)]).out).toBe(WHOLE);
    }
  });

  it('one character per delta', () => {
    expect(streamed(PII, [...TEXT]).out).toBe(WHOLE);
  });

  it('releases text once no match can start in it: only the word being written waits for an email', () => {
    const s = new TextScanner(finders({ id: 'e', kind: 'pii', entities: ['email'], on: ['output'], action: 'redact' }));
    expect(s.push('Hello there, write to jane')).toBe('Hello there, write to');
    expect(s.push('.doe@exa')).toBe('');
    expect(s.push('mple.com today')).toBe(' [REDACTED:EMAIL]');
    expect(s.flush()).toBe(' today');
  });

  it('never releases half a character', () => {
    const s = new TextScanner(finders({ id: 'r', kind: 'regex', patterns: ['xyz'], on: ['output'], action: 'redact' }));
    const text = 'Smile😀and😀😀wave🌊bye';
    let out = '';
    for (const ch of text.split('')) {
      const piece = s.push(ch);
      if (piece) expect(/[\uD800-\uDBFF]$/.test(piece)).toBe(false);
      out += piece;
    }
    expect(out + s.flush()).toBe(text);
  });

  it('a block releases only the text before its match, and nothing after', () => {
    const fs = finders({ id: 'secret', kind: 'regex', patterns: ['project nightfall'], on: ['output'], action: 'block' });
    const r = streamed(fs, ['The code name is proj', 'ect night', 'fall and more text follows']);
    expect(r).toEqual({ out: 'The code name is ', blocked: 'secret' });
  });

  it('computes a regular expression span, unbounded ones taking the bound', () => {
    expect(regexSpan('abc')).toBe(3);
    expect(regexSpan('a{2,5}(?:bc|d)?')).toBe(7);
    expect(regexSpan('\\d{3}-\\d{4}')).toBe(15);
    expect(regexSpan('(?<=x)y\\b')).toBe(1);
    expect(regexSpan('a+')).toBeNull();
    expect(regexSpan('(a)\\1')).toBeNull();
    const [f] = finders({ id: 'r', kind: 'regex', patterns: ['x.*y'], maxSpan: 40, on: ['output'], action: 'redact' });
    expect(f!.span).toBe(40);
  });
});
