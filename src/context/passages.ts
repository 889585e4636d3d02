/**
 * Splits a knowledge document (plain text or markdown) into passages of a few
 * hundred tokens for retrieval.
 *
 * Rules, in order of precedence:
 *  - Paragraphs (blank-line separated blocks) are kept whole when they fit the
 *    target; longer ones are split at sentence boundaries, and a single sentence
 *    longer than the target is split at whitespace (never mid-word).
 *  - Markdown headings are glued to the text that follows them, and a new
 *    section starts a new passage once the current one is at least half full.
 *  - Consecutive passages overlap: a passage begins with the last sentence(s)
 *    of the previous one (at most `overlapTokens`, or a single last sentence of
 *    up to twice that), except at section starts where the context changes.
 *
 * Token counts come from gpt-tokenizer. A passage holds at most about
 * `targetTokens + overlapTokens` (new text within the target, plus overlap),
 * except for fenced code blocks, which are never split, and single "words"
 * longer than the target.
 */
import { loadTokenCounter } from '../billing/tokens.js';

/**
 * gpt-tokenizer's count of `text`. Its tables load with the first count (an idle gateway does
 * without them); the module is Node's to cache. Should it fail to load, the UTF-8 byte
 * length stands in: never below the token count, so a passage never looks smaller than it is.
 */
export function countTokens(text: string): number {
  const count = loadTokenCounter();
  return count ? count(text) : Buffer.byteLength(text, 'utf8');
}

export const DEFAULT_TARGET_TOKENS = 220;
export const DEFAULT_OVERLAP_TOKENS = 30;

export interface SplitOptions {
  targetTokens?: number;
  overlapTokens?: number;
}

export interface PassageWithTokens {
  text: string;
  /** Exact gpt-tokenizer count of `text`. */
  tokens: number;
}

/** A sentence (or heading line, or word-split fragment) and the separator placed before it. */
interface Sentence {
  text: string;
  tokens: number;
  sep: string;
}

/** The packing unit: a whole short paragraph, or one sentence of a long one. */
interface Group {
  sentences: Sentence[];
  tokens: number;
  startsSection: boolean;
}

interface Block {
  heading: string[];
  body: string;
}

const HEADING = /^ {0,3}#{1,6}\s+\S/;
const FENCE = /^ {0,3}(```|~~~)/;
// ICU breaks after these abbreviations; we glue the pieces back together.
const ABBREVIATION = /(?:^|\s)(?:mr|mrs|ms|dr|prof|st|vs|inc|ltd|approx|fig)\.$/i;

const sentenceSegmenter = new Intl.Segmenter('en', { granularity: 'sentence' });
const wordSegmenter = new Intl.Segmenter('en', { granularity: 'word' });

export function splitIntoPassages(text: string, opts: SplitOptions = {}): string[] {
  return splitIntoPassagesWithTokens(text, opts).map((p) => p.text);
}

/** Same as splitIntoPassages but also returns each passage's exact token count. */
export function splitIntoPassagesWithTokens(text: string, opts: SplitOptions = {}): PassageWithTokens[] {
  const target = Math.max(16, Math.floor(opts.targetTokens ?? DEFAULT_TARGET_TOKENS));
  const overlap = Math.max(0, Math.floor(opts.overlapTokens ?? DEFAULT_OVERLAP_TOKENS));

  const groups: Group[] = [];
  for (const block of toBlocks(text)) groups.push(...blockToGroups(block, target));

  const passages: PassageWithTokens[] = [];
  let current: Sentence[] = [];
  let carried = 0; // tokens of overlap at the start of `current`
  let fresh = 0; // tokens of new material in `current`

  const flush = (): void => {
    if (fresh === 0) return; // only overlap left: nothing new to emit
    const passageText = render(current);
    passages.push({ text: passageText, tokens: countTokens(passageText) });
  };

  for (const group of groups) {
    const sectionBreak = group.startsSection && fresh >= target / 2;
    if (fresh > 0 && (sectionBreak || carried + fresh + group.tokens > target)) {
      flush();
      const tail = sectionBreak ? [] : overlapTail(current, overlap);
      current = tail;
      carried = sum(tail);
      fresh = 0;
    }
    // The overlap is optional: drop it rather than let a big group overflow.
    if (fresh === 0 && carried > 0 && carried + group.tokens > target + overlap) {
      current = [];
      carried = 0;
    }
    current.push(...group.sentences);
    fresh += group.tokens;
  }
  flush();
  return passages;
}

/** Blank-line separated blocks; fenced code stays whole; headings attach to the next block. */
function toBlocks(text: string): Block[] {
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  const raw: string[] = [];
  let buf: string[] = [];
  const end = (): void => {
    if (buf.length > 0) raw.push(buf.join('\n'));
    buf = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? '';
    const fence = FENCE.exec(line);
    if (fence) {
      end();
      buf.push(line);
      for (i++; i < lines.length; i++) {
        const inner = lines[i] ?? '';
        buf.push(inner);
        if (inner.trimStart().startsWith(fence[1] ?? '```')) break;
      }
      end();
    } else if (line.trim() === '') {
      end();
    } else if (HEADING.test(line)) {
      end();
      raw.push(line.trim());
    } else {
      buf.push(line.trimEnd());
    }
  }
  end();

  const blocks: Block[] = [];
  let pending: string[] = [];
  for (const chunk of raw) {
    if (HEADING.test(chunk) && !chunk.includes('\n')) pending.push(chunk);
    else {
      blocks.push({ heading: pending, body: chunk });
      pending = [];
    }
  }
  if (pending.length > 0) blocks.push({ heading: pending, body: '' });
  return blocks;
}

function blockToGroups(block: Block, target: number): Group[] {
  const startsSection = block.heading.length > 0;
  const heading = block.heading.map((h, i) => sentence(h, i === 0 ? '\n\n' : '\n'));
  const firstSep = startsSection ? '\n' : '\n\n';

  const body: Sentence[] = [];
  if (FENCE.test(block.body)) {
    body.push(sentence(block.body, firstSep)); // code is never split
  } else {
    let sep = firstSep;
    for (const s of toSentences(block.body)) {
      body.push(sentence(s.text, sep));
      sep = s.after;
    }
  }

  // Sums of per-sentence counts are within a token or two of the exact count.
  const total = sum(heading) + sum(body);
  if (total <= target || FENCE.test(block.body)) {
    return [{ sentences: [...heading, ...body], tokens: total, startsSection }];
  }

  const pieces = body.flatMap((s) => (s.tokens <= target ? [s] : splitAtWords(s, target)));
  const groups: Group[] = pieces.map((p) => ({ sentences: [p], tokens: p.tokens, startsSection: false }));
  const first = groups[0];
  if (first && heading.length > 0) {
    // The heading travels with the first sentence so it is never left dangling.
    first.sentences.unshift(...heading);
    first.tokens += sum(heading);
    first.startsSection = true;
  } else if (heading.length > 0) {
    groups.push({ sentences: heading, tokens: sum(heading), startsSection: true });
  }
  return groups;
}

/** Sentences with the separator that followed them: a line break, a space, or nothing (CJK). */
function toSentences(body: string): Array<{ text: string; after: string }> {
  const out: Array<{ text: string; after: string }> = [];
  const separator = (s: string): string => (/\n\s*$/.test(s) ? '\n' : /\s$/.test(s) ? ' ' : '');
  let carry = '';
  for (const { segment } of sentenceSegmenter.segment(body)) {
    const joined = carry + segment;
    const trimmed = joined.trim();
    if (trimmed === '') continue;
    if (ABBREVIATION.test(trimmed) && !segment.includes('\n')) {
      carry = joined;
      continue;
    }
    carry = '';
    out.push({ text: trimmed, after: separator(joined) });
  }
  if (carry.trim() !== '') out.push({ text: carry.trim(), after: '' });
  return out;
}

/**
 * Last resort for an over-long sentence: cut at whitespace into target-sized
 * pieces. A whitespace-free run longer than the target (e.g. CJK text) is cut
 * at word boundaries found by Intl.Segmenter instead; only a single "word"
 * longer than the target (a URL, a base64 blob) is left oversized.
 */
function splitAtWords(s: Sentence, target: number): Sentence[] {
  const out: Sentence[] = [];
  let piece = '';
  let tokens = 0;
  const emit = (): void => {
    // Rejoin with a space only where the original had whitespace (not inside CJK runs).
    const sep = out.length === 0 ? s.sep : /^\s/.test(piece) ? ' ' : '';
    if (piece.trim() !== '') out.push(sentence(piece.trim(), sep));
    piece = '';
    tokens = 0;
  };
  for (const unit of wordUnits(s.text, target)) {
    const cost = countTokens(unit);
    if (tokens > 0 && tokens + cost > target) emit();
    piece += unit;
    tokens += cost;
  }
  emit();
  return out;
}

/** Whitespace-delimited words (each with its leading space), long runs broken at word boundaries. */
function wordUnits(text: string, target: number): string[] {
  const units: string[] = [];
  for (const m of text.matchAll(/\s*\S+/g)) {
    const unit = m[0];
    if (countTokens(unit) <= target) units.push(unit);
    else for (const { segment } of wordSegmenter.segment(unit)) units.push(segment);
  }
  return units;
}

/** The trailing sentences that start the next passage. Headings are never carried alone. */
function overlapTail(sentences: Sentence[], overlap: number): Sentence[] {
  if (overlap === 0) return [];
  const tail: Sentence[] = [];
  let tokens = 0;
  for (let i = sentences.length - 1; i >= 0; i--) {
    const s = sentences[i];
    if (!s) break;
    const within = tokens + s.tokens <= overlap;
    const singleLong = tail.length === 0 && s.tokens <= overlap * 2;
    if (!within && !singleLong) break;
    tail.unshift(s);
    tokens += s.tokens;
    if (!within) break;
  }
  while (tail.length > 0 && HEADING.test(tail[tail.length - 1]?.text ?? '')) tail.pop();
  return tail.map((s, i) => (i === 0 ? { ...s, sep: '' } : s));
}

function sentence(text: string, sep: string): Sentence {
  return { text, tokens: countTokens(text), sep };
}

function render(sentences: Sentence[]): string {
  return sentences
    .map((s, i) => (i === 0 ? s.text : s.sep + s.text))
    .join('')
    .trim();
}

function sum(sentences: Sentence[]): number {
  let total = 0;
  for (const s of sentences) total += s.tokens;
  return total;
}
