/**
 * The guardrails' detectors and their configuration, without a gateway: what each PII entity
 * finds (and what its check leaves alone), redaction that never keeps what it found and is
 * stable, and the config errors that name the bad field.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ibanChecks, luhn } from '../../src/guardrails/entities.js';
import { compileGuardrail } from '../../src/guardrails/guardrail.js';
import { TextScanner } from '../../src/guardrails/scanner.js';
import { ConfigError, parseOptions } from '../../src/options.js';
import { guardrailSchema } from '../../src/options/guardrails.js';

const pii = (entities?: string[]) => compileGuardrail(guardrailSchema.parse({ id: 'pii', kind: 'pii', action: 'redact', ...(entities ? { entities } : {}) }));

/** A 16-digit number with `ok` deciding whether it passes Luhn (the last digit is chosen). */
function cardNumber(prefix15: string, ok: boolean): string {
  for (let d = 0; d < 10; d++) if (luhn(prefix15 + d) === ok) return prefix15 + d;
  throw new Error('unreachable');
}

describe('PII entities', () => {
  const g = pii();

  it('redacts each entity with its marker', () => {
    const text =
      'Mail jane.doe+x@example.co.uk or call +44 20 7946 0958 / (555) 123-4567; card 4111 1111 1111 1111, ' +
      'IBAN DE89 3704 0044 0532 0130 00, SSN 123-45-6789, host 192.168.10.20 and 2001:db8::8a2e:370:7334.';
    expect(g.redact(text)).toBe(
      'Mail [REDACTED:EMAIL] or call [REDACTED:PHONE] / [REDACTED:PHONE]; card [REDACTED:CREDIT_CARD], ' +
        'IBAN [REDACTED:IBAN], SSN [REDACTED:SSN], host [REDACTED:IP_ADDRESS] and [REDACTED:IP_ADDRESS].',
    );
  });

  it('a 16-digit number that fails Luhn is not a card; one that passes is', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[1-9]\d{14}$/), (prefix) => {
        const bad = cardNumber(prefix, false);
        const good = cardNumber(prefix, true);
        expect(g.redact(`order ${bad} shipped`)).toBe(`order ${bad} shipped`);
        expect(g.redact(`card ${good} used`)).toBe('card [REDACTED:CREDIT_CARD] used');
      }),
    );
  });

  it('a card written with its expiry or CVV after it (or a number before it) is still found, alone', () => {
    expect(g.redact('card 4111 1111 1111 1111 12/26 cvv 123')).toBe('card [REDACTED:CREDIT_CARD] 12/26 cvv 123');
    expect(g.redact('card 4111 1111 1111 1111 123')).toBe('card [REDACTED:CREDIT_CARD] 123');
    expect(g.redact('line 2 4111-1111-1111-1111')).toBe('line 2 [REDACTED:CREDIT_CARD]');
    expect(g.redact('pan 4111111111111111 12/26')).toBe('pan [REDACTED:CREDIT_CARD] 12/26');
    expect(g.finds('card 4111 1111 1111 1111 12/26')).toBe(true);
    // The longest run that passes, not the first tried; digits on both sides of the card.
    expect(g.redact('item 4 4536 1819 1206 4600')).toBe('item 4 [REDACTED:CREDIT_CARD]');
    expect(g.redact('no 84 4084-4871-8302-0775 1')).toBe('no 84 [REDACTED:CREDIT_CARD] 1');
    // A piece of a longer unbroken number is no card, nor are groups that never pass Luhn.
    expect(g.redact('ref 94111111111111111 ok')).toBe('ref 94111111111111111 ok');
    const bad = cardNumber('411111111111111', false);
    expect(g.redact(`order ${bad.replace(/(\d{4})(?=\d)/g, '$1 ')} 12`)).toBe(`order ${bad.replace(/(\d{4})(?=\d)/g, '$1 ')} 12`);
  });

  it('streamed a character at a time, the card before its expiry is redacted alone', () => {
    const finders = g.finders.map((f) => ({ ...f, guardrail: 'pii', block: false }));
    const scanner = new TextScanner(finders);
    let out = '';
    for (const ch of 'card 4111 1111 1111 1111 12/26 ok') out += scanner.push(ch);
    expect(out + scanner.flush()).toBe('card [REDACTED:CREDIT_CARD] 12/26 ok');
  });

  it('an IPv4 address followed by its port is found; the port stays', () => {
    expect(g.redact('server is 10.1.2.3:8080, and host 10.0.0.5:22.')).toBe('server is [REDACTED:IP_ADDRESS]:8080, and host [REDACTED:IP_ADDRESS]:22.');
    expect(g.redact('mapped ::ffff:10.1.2.3 here')).toBe('mapped [REDACTED:IP_ADDRESS] here');
  });

  it('an IBAN whose check digits are wrong is left alone', () => {
    expect(ibanChecks('GB82WEST12345698765432')).toBe(true);
    expect(ibanChecks('GB83WEST12345698765432')).toBe(false);
    expect(g.redact('pay GB82 WEST 1234 5698 7654 32 now')).toBe('pay [REDACTED:IBAN] now');
    expect(g.redact('ref GB83WEST12345698765432 now')).toBe('ref GB83WEST12345698765432 now');
  });

  it('finds only the configured entities, and leaves ordinary numbers, times and versions alone', () => {
    expect(pii(['email']).redact('a@b.io 4111111111111111')).toBe('[REDACTED:EMAIL] 4111111111111111');
    const plain = 'At 12:30:45 on 2024-05-01 version 1.2.3 cost 1234.56, ticket 987654, 999.1.1.1';
    expect(g.redact(plain)).toBe(plain);
    expect(g.finds(plain)).toBe(false);
  });
});

/** Texts built of words and separators around PII values, which redaction must all remove. */
const piiValue = fc.oneof(
  fc.tuple(fc.stringMatching(/^[a-z][a-z0-9._]{0,10}[a-z0-9]$/), fc.stringMatching(/^[a-z]{2,10}\.(com|org|io|de)$/)).map(([u, d]) => `${u}@${d}`),
  fc.stringMatching(/^[1-9]\d{14}$/).map((p) => cardNumber(p, true)),
  fc.constantFrom('DE89370400440532013000', 'GB82 WEST 1234 5698 7654 32', 'FR1420041010050500013M02606'),
  fc.tuple(fc.integer({ min: 100, max: 665 }), fc.integer({ min: 10, max: 99 }), fc.integer({ min: 1000, max: 9999 })).map(([a, b, c]) => `${a}-${b}-${c}`),
  fc.tuple(fc.integer({ min: 200, max: 999 }), fc.integer({ min: 200, max: 999 }), fc.integer({ min: 1000, max: 9999 })).map(([a, b, c]) => `(${a}) ${b}-${c}`),
  fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((o) => o.join('.')),
);
const filler = fc.string({ maxLength: 12 }).map((s) => s.replace(/[\w@.:+()-]/g, ' '));

describe('redaction (property)', () => {
  it('never leaves a match in the output, and redacting again changes nothing', () => {
    const g = pii();
    fc.assert(
      fc.property(fc.array(fc.tuple(filler, piiValue), { minLength: 1, maxLength: 6 }), filler, (pieces, tail) => {
        const text = `${pieces.map(([f, v]) => `${f} ${v} `).join('')}${tail}`;
        const out = g.redact(text);
        for (const [, value] of pieces) expect(out).not.toContain(value);
        expect(g.finds(out)).toBe(false);
        expect(g.redact(out)).toBe(out);
      }),
      { numRuns: 300 },
    );
  });
});

describe('guardrail selection', () => {
  const [acme, gpt] = parseOptions({
    guardrails: [
      { id: 'acme-only', kind: 'regex', patterns: ['secret'], action: 'redact', accounts: ['acme'] },
      { id: 'gpt', kind: 'regex', patterns: ['forbidden'], ignoreCase: true, action: 'block', models: ['openai/*', 'exact'] },
    ],
  }).guardrails.map(compileGuardrail);

  it('accounts and models pick the guardrails that run; a regex honours ignoreCase', () => {
    expect([acme!.covers('acme', 'x/m'), acme!.covers('other', 'x/m')]).toEqual([true, false]);
    expect([gpt!.covers('a', 'openai/gpt-4o'), gpt!.covers('a', 'exact'), gpt!.covers('a', 'exact2'), gpt!.covers('a', 'anthropic/c')]).toEqual([true, true, false, false]);
    expect([gpt!.finds('FORBIDDEN'), acme!.finds('SECRET'), acme!.redact('a secret')]).toEqual([true, false, 'a [REDACTED]']);
  });
});

describe('guardrails config', () => {
  const fails = (guardrails: unknown[]) => {
    try {
      parseOptions({ guardrails });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as Error).message;
    }
    throw new Error('accepted');
  };

  it('a bad regex, an unknown entity or kind, and a duplicate id are config errors naming the field', () => {
    expect(fails([{ id: 'r', kind: 'regex', patterns: ['ok', '(open'], action: 'block' }])).toContain('guardrails[0].patterns[1]: is not a valid regular expression');
    expect(fails([{ id: 'r', kind: 'regex', patterns: ['a*'], action: 'block' }])).toContain('guardrails[0].patterns[0]: matches the empty text');
    expect(fails([{ id: 'p', kind: 'pii', entities: ['passport'], action: 'redact' }])).toContain('guardrails[0].entities[0]');
    expect(fails([{ id: 'm', kind: 'moderation', model: 'omni-moderation-latest' }])).toContain('guardrails[0].upstream');
    expect(fails([{ id: 'm', kind: 'moderation', upstream: 'nowhere', model: 'omni-moderation-latest' }])).toContain('guardrails[0].upstream: no upstream named "nowhere"');
    expect(fails([{ id: 'p', kind: 'pii', action: 'redact', on: ['sideways'] }])).toContain('guardrails[0].on[0]');
    expect(fails([{ id: 'r', kind: 'regex', patterns: ['x+'], action: 'block', maxSpan: 0 }])).toContain('guardrails[0].maxSpan');
    expect(fails([{ id: 'p', kind: 'pii', action: 'redact' }, { id: 'p', kind: 'pii', action: 'block' }])).toContain('guardrails[1].id: duplicate guardrail id "p"');
  });
});
