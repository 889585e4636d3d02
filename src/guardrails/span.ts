/**
 * The most UTF-16 code units a regular expression's match can span, read from its source: what
 * a stream must hold back so that a match split across chunks is still caught. A pattern with
 * an unbounded repeat (`*`, `+`, `{n,}`) or a back-reference has no such bound: null, and the
 * guardrail's `maxSpan` (or the default) is used instead. Any atom that may match a character
 * outside the BMP (a class, `.`, an escape other than a literal) counts 2: an overestimate only
 * holds back a little more.
 */

/** The span a match of an unbounded pattern is assumed to stay within, unless configured. */
export const DEFAULT_MAX_SPAN = 256;

export function regexSpan(source: string): number | null {
  const parser = new SpanParser(source);
  try {
    const span = parser.alternation();
    return parser.pos < source.length ? null : span;
  } catch {
    return null;
  }
}

const UNBOUNDED = Number.POSITIVE_INFINITY;

class SpanParser {
  pos = 0;
  constructor(private readonly src: string) {}

  /** `a|b|c`: the longest branch. */
  alternation(): number {
    let most = this.sequence();
    while (this.src[this.pos] === '|') {
      this.pos++;
      most = Math.max(most, this.sequence());
    }
    if (!Number.isFinite(most)) throw new Error('unbounded');
    return most;
  }

  private sequence(): number {
    let total = 0;
    while (this.pos < this.src.length && this.src[this.pos] !== '|' && this.src[this.pos] !== ')') {
      const atom = this.atom();
      const times = this.quantifier();
      if (atom > 0) total += atom * times;
    }
    return total;
  }

  /** One atom's most code units (0 for an assertion). */
  private atom(): number {
    const c = this.src[this.pos++]!;
    if (c === '^' || c === '$') return 0;
    if (c === '.') return 2;
    if (c === '[') {
      while (this.pos < this.src.length && this.src[this.pos] !== ']') this.pos += this.src[this.pos] === '\\' ? 2 : 1;
      this.pos++;
      return 2;
    }
    if (c === '(') {
      let assertion = false;
      if (this.src[this.pos] === '?') {
        const rest = this.src.slice(this.pos, this.pos + 3);
        if (rest.startsWith('?=') || rest.startsWith('?!') || rest.startsWith('?<=') || rest.startsWith('?<!')) assertion = true;
        if (assertion) this.pos += rest.startsWith('?<') ? 3 : 2;
        else if (rest.startsWith('?:')) this.pos += 2;
        else if (rest.startsWith('?<')) this.pos = this.src.indexOf('>', this.pos) + 1;
      }
      const inner = this.alternation();
      if (this.src[this.pos] !== ')') throw new Error('unclosed group');
      this.pos++;
      return assertion ? 0 : inner;
    }
    if (c === '\\') {
      const e = this.src[this.pos++]!;
      if (e === 'b' || e === 'B') return 0;
      if (/[1-9k]/.test(e)) throw new Error('back-reference');
      if (e === 'p' || e === 'P') {
        if (this.src[this.pos] === '{') this.pos = this.src.indexOf('}', this.pos) + 1;
        return 2;
      }
      if (e === 'u' && this.src[this.pos] === '{') {
        this.pos = this.src.indexOf('}', this.pos) + 1;
        return 2;
      }
      if (e === 'u') this.pos += 4;
      else if (e === 'x') this.pos += 2;
      else if (e === 'c') this.pos += 1;
      return /[dwsDWS]/.test(e) ? 2 : 1;
    }
    // A literal: a surrogate pair is two code units.
    const code = c.charCodeAt(0);
    if (code >= 0xd800 && code <= 0xdbff) {
      this.pos++;
      return 2;
    }
    return 1;
  }

  /** The most times the atom just read repeats. */
  private quantifier(): number {
    const c = this.src[this.pos];
    let most = 1;
    if (c === '*' || c === '+') {
      this.pos++;
      most = UNBOUNDED;
    } else if (c === '?') {
      this.pos++;
    } else if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.src.slice(this.pos));
      if (!m) return 1; // a literal brace
      this.pos += m[0].length;
      most = m[2] === undefined ? Number(m[1]) : m[3] === '' ? UNBOUNDED : Number(m[3]);
    } else return 1;
    if (this.src[this.pos] === '?') this.pos++; // lazy
    return most;
  }
}
