/**
 * The output guardrails' reading of one text as it is written, delta by delta (a stream's
 * choice, content part or content block). A match split across deltas must still be caught,
 * so text is released only once no match could still start in it: each finder holds back the
 * last `span` characters (the most its match spans) plus one (the character a lookahead
 * reads), or, for a finder whose matches hold no whitespace, only the word being written when
 * that is less. A match that starts in the released part is decided (its whole extent and the
 * character after it are there), and the release stretches to its end. The last characters
 * released are kept as the next scan's left context (what a lookbehind reads).
 *
 * A redaction replaces each match with its marker; a block releases the text before its match
 * and nothing after: the text is then `blocked` with that guardrail's id.
 */
import { type Finder, locate } from './guardrail.js';

/** A finder of an output guardrail, with the guardrail it belongs to. */
export interface OutputFinder extends Finder {
  guardrail: string;
  block: boolean;
}

/** How much released text a lookbehind may still read (the built-in entities read one character). */
const CONTEXT = 16;

interface Match {
  start: number;
  end: number;
  finder: OutputFinder;
}

export class TextScanner {
  /** Received, not yet released. */
  private held = '';
  /** The last characters released, as received (the left context of the next scan). */
  private before = '';
  /** The guardrail that blocked this text, once one did: nothing more is released. */
  blocked: string | null = null;
  /** The ids of the guardrails that redacted something (each once). */
  readonly redactedBy = new Set<string>();

  constructor(private readonly finders: readonly OutputFinder[]) {}

  /** The text to release for `delta` (redacted; '' while held back or once blocked). */
  push(delta: string): string {
    if (this.blocked !== null) return '';
    this.held += delta;
    return this.scan(false);
  }

  /** The text ends: the rest is released (redacted, or cut at a block). */
  flush(): string {
    if (this.blocked !== null) return '';
    return this.scan(true);
  }

  private scan(final: boolean): string {
    const text = this.before + this.held;
    const off = this.before.length;
    const len = text.length;
    // Where each finder's undecided matches may start; the release ends at the first of them.
    let release = len;
    const matches: Match[] = [];
    let lastSpace = -2;
    for (const f of this.finders) {
      let cut = len;
      if (!final) {
        cut = len - f.span - 1;
        if (f.word) {
          if (lastSpace === -2) lastSpace = lastWhitespace(text);
          cut = Math.max(cut, lastSpace);
        }
        if (cut < off) cut = off;
      }
      if (cut < release) release = cut;
      if ((cut <= off && !final) || (f.needs && !f.needs.test(text))) continue;
      for (const m of text.matchAll(f.pattern)) {
        if (m.index >= cut) break;
        if (m.index + m[0].length <= off) continue;
        const at = locate(f, m[0]);
        if (!at) continue;
        const end = m.index + at[1];
        if (end <= off) continue;
        matches.push({ start: Math.max(m.index + at[0], off), end, finder: f });
      }
    }
    if (matches.length === 0 && release <= off) return '';
    // Earlier guardrails (and finders) first: a match overlapping one already taken is not.
    const taken: Match[] = [];
    for (const m of matches) if (!taken.some((t) => m.start < t.end && t.start < m.end)) taken.push(m);
    taken.sort((a, b) => a.start - b.start);
    let out = '';
    let at = off;
    for (const m of taken) {
      // Taken matches do not overlap: one that starts past the release waits for the next scan.
      if (m.start >= release) break;
      if (m.finder.block) {
        out += text.slice(at, m.start);
        this.blocked = m.finder.guardrail;
        this.held = '';
        return out;
      }
      out += text.slice(at, m.start) + m.finder.marker;
      this.redactedBy.add(m.finder.guardrail);
      at = m.end;
      if (m.end > release) release = m.end;
    }
    // Never half a character: a high surrogate at the cut waits for its pair.
    if (!final && release > at && isHighSurrogate(text.charCodeAt(release - 1))) release--;
    if (release > at) out += text.slice(at, release);
    else release = Math.max(release, at);
    this.before = text.slice(Math.max(0, release - CONTEXT), release);
    this.held = text.slice(release);
    return out;
  }
}

const isHighSurrogate = (code: number): boolean => code >= 0xd800 && code <= 0xdbff;

function lastWhitespace(text: string): number {
  for (let i = text.length - 1; i >= 0; i--) {
    const c = text.charCodeAt(i);
    if (c === 32 || c === 10 || c === 9 || c === 13 || c === 0xa0 || c === 0x3000) return i;
  }
  return -1;
}

/** A whole text through the output guardrails at once (a plain answer). */
export function scanWhole(finders: readonly OutputFinder[], text: string): { text: string; blocked: string | null; redactedBy: Set<string> } {
  const s = new TextScanner(finders);
  const out = s.push(text) + s.flush();
  return { text: out, blocked: s.blocked, redactedBy: s.redactedBy };
}
