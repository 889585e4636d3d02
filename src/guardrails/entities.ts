/**
 * The personal data a `pii` guardrail finds. Each entity is a pattern for its shape and, where
 * the data carries one, the check that tells it from any other run of digits: a card number
 * passes Luhn, an IBAN mod-97. A candidate that fails its check is left as it is (a random
 * 16-digit order number is not a card).
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { PiiEntity } from '../options/guardrails.js';

interface Detector {
  /** Global: every candidate in a text. */
  pattern: RegExp;
  /** Whether a candidate is really the entity; absent: its shape is enough. */
  valid?: (candidate: string) => boolean;
  /** Where in a candidate the entity is, when it may be only part of it ([from, to]; null: nowhere). */
  within?: (candidate: string) => readonly [number, number] | null;
  /** The most characters a match spans (an email: the longest address, 254, RFC 5321). */
  span: number;
  /** A match never holds whitespace: a stream holds back no more than the word being written. */
  word?: boolean;
  /** What every match holds: a text without it is not searched (most prose has no digit or `@`). */
  needs: RegExp;
}

/**
 * In the order they are looked for: the longer, checked shapes first, so that a card or an
 * IBAN is redacted whole before the phone pattern could take a piece of it.
 */
const DETECTORS: ReadonlyArray<[PiiEntity, Detector]> = [
  // Starts only where a run of local-part characters starts: a long run without an `@` is then
  // read once, not once per position (quadratic on a large prompt).
  ['email', { pattern: /(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}/g, span: 254, word: true, needs: /@/ }],
  // Two letters, two check digits, then up to 30 letters or digits, optionally in groups of four.
  ['iban', { pattern: /\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b/g, valid: ibanChecks, span: 44, needs: /\d/ }],
  // 13 to 19 digits, optionally grouped by spaces or dashes; the card may be only some of the
  // groups (an expiry or a CVV written after it, a line number before it).
  ['credit_card', { pattern: /(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])/g, within: cardWithin, span: 37, needs: /\d/ }],
  // A US social security number as written (AAA-GG-SSSS), without the numbers never issued.
  ['ssn', { pattern: /(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])/g, span: 11, word: true, needs: /\d/ }],
  // International (+ and 8 to 15 digits) or North American ((555) 123-4567, 555-123-4567, 555.123.4567).
  [
    'phone',
    {
      pattern: /(?<![\w+])(?:\+\d(?:[ .-]?\(?\d\)?){7,14}|\(?\d{3}\)?[ .-]?\d{3}[ .-]\d{4})(?![\w-])/g,
      valid: (c) => {
        const digits = c.replace(/\D/g, '').length;
        return digits >= 8 && digits <= 15;
      },
      span: 58,
      needs: /\d/,
    },
  ],
  [
    'ip_address',
    {
      // IPv4, which may be followed by a port (`10.0.0.5:22`: IPv6 never has one after it);
      // IPv6 ending in an IPv4 address (`::ffff:10.1.2.3`); IPv6.
      pattern:
        /(?<![\w.:])(?:\d{1,3}(?:\.\d{1,3}){3}(?!\w|\.\d)|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){1,6}:\d{1,3}(?:\.\d{1,3}){3}(?!\w|\.\d)|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:]|\.\d))/g,
      // An IPv6 address has a hex digit somewhere: "::" alone is not worth a redaction.
      valid: (c) => isIPv4(c) || (isIPv6(c) && /[0-9A-Fa-f]/.test(c)),
      // The longest: six groups of four, then an IPv4 address.
      span: 45,
      word: true,
      needs: /[\d:]/,
    },
  ],
];

/** The entities' detectors, in the order they are looked for, limited to `entities`. */
export function detectorsFor(entities: readonly PiiEntity[]): Array<{ entity: PiiEntity } & Detector> {
  return DETECTORS.filter(([entity]) => entities.includes(entity)).map(([entity, d]) => ({ entity, ...d }));
}

/**
 * The card in a run of 13 to 19 digit groups: the whole run when it passes Luhn, else the
 * longest run of whole groups within it (most digits first, then the earliest) that passes:
 * an expiry or CVV written after a card, a line number before it. An unbroken run of digits
 * is a card whole or not at all: a piece of a longer number is not one.
 */
export function cardWithin(candidate: string): readonly [number, number] | null {
  if (luhn(candidate.replace(/[ -]/g, ''))) return [0, candidate.length];
  const groups = [...candidate.matchAll(/\d+/g)].map((m) => [m.index, m.index + m[0].length] as const);
  const runs: { from: number; to: number; digits: string }[] = [];
  for (let i = 0; i < groups.length; i++) {
    for (let j = i; j < groups.length; j++) {
      if (i === 0 && j === groups.length - 1) continue; // the whole run, checked above
      const from = groups[i]![0];
      const to = groups[j]![1];
      const digits = candidate.slice(from, to).replace(/[ -]/g, '');
      if (digits.length >= 13) runs.push({ from, to, digits });
    }
  }
  runs.sort((a, b) => b.digits.length - a.digits.length || a.from - b.from);
  const card = runs.find((r) => luhn(r.digits));
  return card ? [card.from, card.to] : null;
}

/** The Luhn check of a card number's digits: doubling every second digit from the right, the sum ends in 0. */
export function luhn(digits: string): boolean {
  if (!/^\d{13,19}$/.test(digits)) return false;
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

/**
 * The IBAN check (ISO 13616): the first four characters moved to the end, letters read as
 * 10..35, the number mod 97 is 1. Computed piecewise, so no big integer is needed.
 */
export function ibanChecks(candidate: string): boolean {
  const iban = candidate.replace(/ /g, '');
  if (iban.length < 15 || iban.length > 34) return false;
  const moved = iban.slice(4) + iban.slice(0, 4);
  let rest = 0;
  for (const ch of moved) {
    const code = ch.charCodeAt(0);
    const value = code >= 65 ? code - 55 : code - 48;
    rest = (value >= 10 ? rest * 100 + value : rest * 10 + value) % 97;
  }
  return rest === 1;
}
