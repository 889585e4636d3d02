/**
 * In-memory knowledge retrieval: documents are split into passages once, at
 * add time, and ranked per query with MiniSearch (BM25+). Pure: no I/O.
 *
 * Latency notes (the target is p99 < 5 ms at 10,000+ passages):
 *  - Restriction to a set of documents happens inside MiniSearch's scoring
 *    loop: `boostDocument` returning 0 skips a posting before it is scored or
 *    allocated, so walking a posting of a foreign passage is cheap.
 *  - What is expensive is every posting that becomes a result object. When the
 *    searchable space is large, a first pass with only the rarest query terms
 *    picks the candidates; a second pass scores those candidates with all the
 *    terms (exact BM25 over the full query, nothing allocated for the rest).
 *  - Query terms are taken rarest first, at most 64 and at most ~10k postings;
 *    the commonest words of a long message (low IDF) are the ones dropped.
 */
import MiniSearch, { type SearchResult } from 'minisearch';
import { countTokens, splitIntoPassagesWithTokens, type SplitOptions } from './passages.js';

export interface KnowledgeDocument {
  id: string;
  title: string;
  text: string;
}

export interface RetrievedPassage {
  documentId: string;
  title: string;
  text: string;
  score: number;
  /** gpt-tokenizer count of `text`, computed at add time. */
  tokens: number;
}

export interface KnowledgeSearchOptions {
  /** Only passages of these documents are considered. Omit to search everything. */
  documentIds?: ReadonlySet<string> | string[];
  /**
   * Upper bound on the tokens of the returned passages as the knowledge message carries them:
   * each passage's text and its source line (whose title an operator may make long).
   */
  tokenBudget: number;
  /** Default 8. */
  maxPassages?: number;
}

export interface KnowledgeIndex {
  /** Splits and indexes the document (replacing one with the same id); returns its passage count. */
  addDocument(doc: KnowledgeDocument): number;
  removeDocument(id: string): void;
  search(query: string, opts: KnowledgeSearchOptions): RetrievedPassage[];
  /** Passages of one document, or of the whole index. */
  passageCount(documentId?: string): number;
  documentIds(): string[];
}

export interface KnowledgeIndexOptions {
  split?: SplitOptions;
  /** Expected result objects allowed in one pass before switching to two passes. Default 500. */
  resultBudget?: number;
  /** Cap on postings walked per query; the commonest terms beyond it are ignored. Default 10,000. */
  maxPostingsWalked?: number;
}

export const DEFAULT_MAX_PASSAGES = 8;
/** A long pasted message is reduced to its rarest distinct terms. */
export const MAX_QUERY_TERMS = 64;
/** Only the head and tail of a huge message are analysed (the question is usually at one end). */
const MAX_QUERY_CHARS = 8000;
const DEFAULT_MAX_POSTINGS_WALKED = 10_000;
const DEFAULT_RESULT_BUDGET = 500;
/** How far down the ranking we look for passages that still fit the token budget. */
const MAX_CANDIDATES_SCANNED = 50;

interface PassageRecord {
  documentId: string;
  title: string;
  text: string;
  tokens: number;
  /** What the passage takes of the knowledge message: `tokens` and its source line's. */
  cost: number;
}

/** What MiniSearch sees: fields hold pre-analysed terms joined by spaces. */
interface IndexedPassage {
  id: number;
  title: string;
  text: string;
}

const splitTerms = (s: string): string[] => (s === '' ? [] : s.split(' '));
const identity = (t: string): string => t;

export function createKnowledgeIndex(opts: KnowledgeIndexOptions = {}): KnowledgeIndex {
  return new MiniSearchIndex(opts);
}

class MiniSearchIndex implements KnowledgeIndex {
  private readonly resultBudget: number;
  private readonly maxPostingsWalked: number;
  private readonly split: SplitOptions | undefined;
  private readonly miniSearch: MiniSearch<IndexedPassage>;
  // Passage ids are array slots; removed passages leave a hole (never reused).
  private readonly passages: Array<PassageRecord | undefined> = [];
  private readonly documents = new Map<string, { passageIds: number[] }>();
  /** Live passages containing each term (in text or title). */
  private readonly docFreq = new Map<string, number>();

  constructor(opts: KnowledgeIndexOptions) {
    this.resultBudget = opts.resultBudget ?? DEFAULT_RESULT_BUDGET;
    this.maxPostingsWalked = opts.maxPostingsWalked ?? DEFAULT_MAX_POSTINGS_WALKED;
    this.split = opts.split;
    // We analyse text ourselves (so we can keep document frequencies for the
    // query planner); MiniSearch only splits the pre-analysed term strings.
    this.miniSearch = new MiniSearch<IndexedPassage>({
      fields: ['text', 'title'],
      storeFields: [],
      tokenize: splitTerms,
      processTerm: identity,
      searchOptions: { boost: { title: 1 }, tokenize: splitTerms, processTerm: identity },
    });
  }

  private countTerms(terms: Iterable<string>, delta: 1 | -1): void {
    for (const t of terms) {
      const n = (this.docFreq.get(t) ?? 0) + delta;
      if (n > 0) this.docFreq.set(t, n);
      else this.docFreq.delete(t);
    }
  }

  removeDocument(id: string): void {
    const doc = this.documents.get(id);
    if (!doc) return;
    for (const passageId of doc.passageIds) {
      const p = this.passages[passageId];
      if (p) this.countTerms(new Set([...analyze(p.text), ...analyze(p.title)]), -1);
      this.miniSearch.discard(passageId); // lazy removal; MiniSearch vacuums in the background
      this.passages[passageId] = undefined;
    }
    this.documents.delete(id);
  }

  addDocument(doc: KnowledgeDocument): number {
    this.removeDocument(doc.id);
    const titleTerms = analyze(doc.title);
    const passageIds: number[] = [];
    // Each passage goes out under its document's source line, and a blank line apart.
    const lineTokens = countTokens(`${sourceLine(doc.title, doc.id)}\n`) + 1;
    for (const p of splitIntoPassagesWithTokens(doc.text, this.split)) {
      const id = this.passages.length;
      const textTerms = analyze(p.text);
      this.passages.push({ documentId: doc.id, title: doc.title, text: p.text, tokens: p.tokens, cost: p.tokens + lineTokens });
      passageIds.push(id);
      this.countTerms(new Set([...textTerms, ...titleTerms]), 1);
      this.miniSearch.add({ id, title: titleTerms.join(' '), text: textTerms.join(' ') });
    }
    this.documents.set(doc.id, { passageIds });
    return passageIds.length;
  }

  search(query: string, searchOpts: KnowledgeSearchOptions): RetrievedPassage[] {
    const maxPassages = searchOpts.maxPassages ?? DEFAULT_MAX_PASSAGES;
    if (searchOpts.tokenBudget <= 0 || maxPassages <= 0) return [];
    const allowed = this.restriction(searchOpts.documentIds);
    if (allowed && allowed.size === 0) return [];

    // Known query terms, rarest first (rare terms are both cheap and discriminating).
    const terms = [...new Set(analyze(clip(query)))].filter((t) => this.docFreq.has(t));
    if (terms.length === 0) return [];
    terms.sort((a, b) => this.df(a) - this.df(b));
    const scored = this.prefixWithin(terms.slice(0, MAX_QUERY_TERMS), this.maxPostingsWalked, 1);
    const hits = this.rank(scored, allowed, maxPassages);
    return this.fitBudget(hits, searchOpts.tokenBudget, maxPassages);
  }

  passageCount(documentId?: string): number {
    return documentId === undefined ? this.miniSearch.documentCount : (this.documents.get(documentId)?.passageIds.length ?? 0);
  }

  documentIds(): string[] {
    return [...this.documents.keys()];
  }

  /** MiniSearch's ranking of `scored` (rarest first) within `allowed`, in one or two passes. */
  private rank(scored: string[], allowed: ReadonlySet<string> | undefined, maxPassages: number): SearchResult[] {
    const miniSearch = this.miniSearch;
    // Expected result objects = postings that land in the searchable space.
    const total = miniSearch.documentCount;
    const space = allowed ? this.passagesIn(allowed) : total;
    const firstPass = space <= this.resultBudget ? scored : this.prefixWithin(scored, this.resultBudget, space / total);

    // Per-query masks indexed by passage id: cheaper in the hot loop than Set lookups.
    const allowedMask = allowed ? this.maskOf(allowed) : undefined;
    const inAllowed = allowedMask && ((id: number) => allowedMask[id] ?? 0);
    const hits = miniSearch.search(firstPass.join(' '), { boostDocument: inAllowed });
    if (firstPass.length === scored.length) return hits;
    if (hits.length >= maxPassages) {
      // Second pass: the full query, scored only on the first pass's candidates.
      const candidates = new Uint8Array(this.passages.length);
      for (const h of hits) candidates[h.id as number] = 1;
      return miniSearch.search(scored.join(' '), { boostDocument: (id: number) => candidates[id] ?? 0 });
    }
    // The rare terms barely occur in this space: fall back to one full pass.
    return miniSearch.search(scored.join(' '), { boostDocument: inAllowed });
  }

  /** The best-ranked passages whose tokens fit `tokenBudget`, at most `maxPassages`. */
  private fitBudget(hits: SearchResult[], tokenBudget: number, maxPassages: number): RetrievedPassage[] {
    const out: RetrievedPassage[] = [];
    let budget = tokenBudget;
    const scanned = Math.min(hits.length, MAX_CANDIDATES_SCANNED);
    for (let i = 0; i < scanned && out.length < maxPassages; i++) {
      const hit = hits[i];
      const p = hit ? this.passages[hit.id as number] : undefined;
      if (!hit || !p || p.cost > budget) continue; // a smaller, lower-ranked one may still fit
      out.push({ documentId: p.documentId, title: p.title, text: p.text, score: hit.score, tokens: p.tokens });
      budget -= p.cost;
    }
    return out;
  }

  private df(term: string): number {
    return this.docFreq.get(term) ?? 0;
  }

  /** Longest prefix of `terms` whose summed df * scale stays within `limit` (at least one term). */
  private prefixWithin(terms: string[], limit: number, scale: number): string[] {
    let sum = 0;
    let n = 0;
    while (n < terms.length && (n === 0 || sum + this.df(terms[n] ?? '') * scale <= limit)) {
      sum += this.df(terms[n] ?? '') * scale;
      n++;
    }
    return terms.slice(0, n);
  }

  private maskOf(ids: ReadonlySet<string>): Uint8Array {
    const mask = new Uint8Array(this.passages.length);
    for (const id of ids) for (const p of this.documents.get(id)?.passageIds ?? []) mask[p] = 1;
    return mask;
  }

  private passagesIn(ids: ReadonlySet<string>): number {
    let n = 0;
    for (const id of ids) n += this.documents.get(id)?.passageIds.length ?? 0;
    return n;
  }

  /** undefined = no restriction needed (nothing given, or every indexed document allowed). */
  private restriction(ids: ReadonlySet<string> | string[] | undefined): ReadonlySet<string> | undefined {
    if (ids === undefined) return undefined;
    const set: ReadonlySet<string> = Array.isArray(ids) ? new Set(ids) : (ids as ReadonlySet<string>);
    let covered = 0;
    for (const id of set) if (this.documents.has(id)) covered++;
    if (covered === this.documents.size) return undefined;
    return covered === 0 ? new Set() : set;
  }
}

export const KNOWLEDGE_PREAMBLE =
  "Use the following excerpts from the account's knowledge base when they are relevant. " +
  'Each excerpt names its source document.';

/**
 * The text of the single system message prepended to a chat request:
 *
 *   <KNOWLEDGE_PREAMBLE>
 *
 *   [Source: <title> (<documentId>)]
 *   <passage text>
 *
 *   [Source: ...]
 *   ...
 *
 * Passages keep the order given (best first). Whitespace runs in titles and
 * ids are flattened to one space so a title cannot forge a source line.
 * Returns just the preamble when there are no passages (callers normally skip
 * the message in that case).
 */
export function formatKnowledgeMessage(
  passages: ReadonlyArray<Pick<RetrievedPassage, 'documentId' | 'title' | 'text'>>,
): string {
  const parts = passages.map((p) => `${sourceLine(p.title, p.documentId)}\n${p.text.trim()}`);
  return [KNOWLEDGE_PREAMBLE, ...parts].join('\n\n');
}

/** A passage's source line: whitespace runs in the title and id flattened, so a title cannot forge a line. */
function sourceLine(title: string, documentId: string): string {
  const flat = (s: string): string => s.replace(/\s+/g, ' ').trim();
  return `[Source: ${flat(title)} (${flat(documentId)})]`;
}

// ---------------------------------------------------------------------------
// Term analysis, shared by indexing and querying: split like MiniSearch's
// default tokeniser, lower-case, drop stop words and one-letter fragments, then
// a light Porter-style suffix strip (plurals, -ed/-ing, final e, final y) so
// "batteries"/"battery" and "ships"/"shipped" meet.

const SPACE_OR_PUNCTUATION = /[\n\r\p{Z}\p{P}]+/u;

export const STOP_WORDS: ReadonlySet<string> = new Set(
  (
    'a about above after again against all am an and any are as at be because been before being below between both ' +
    'but by can could did do does doing down during each few for from further had has have having he her here hers ' +
    'herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on ' +
    'once only or other our ours ourselves out over own same she should so some such than that the their theirs them ' +
    'themselves then there these they this those through to too under until up very was we were what when where which ' +
    'while who whom why will with would you your yours yourself yourselves also may might must shall us get got let ' +
    'tell know please thanks hi hello one ever'
  ).split(' '),
);

function clip(query: string): string {
  if (query.length <= MAX_QUERY_CHARS) return query;
  const half = MAX_QUERY_CHARS / 2;
  return `${query.slice(0, half)} ${query.slice(-half)}`;
}

function analyze(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split(SPACE_OR_PUNCTUATION)) {
    const term = raw === '' ? null : analyzeTerm(raw);
    if (term) out.push(term);
  }
  return out;
}

/** One token to its index term, or null for stop words and noise. */
export function analyzeTerm(raw: string): string | null {
  const term = raw.toLowerCase();
  if (term.length < 2 && !/\d/.test(term)) return null;
  if (STOP_WORDS.has(term)) return null;
  if (/\d/.test(term)) return term;
  const stemmed = stem(term);
  return STOP_WORDS.has(stemmed) ? null : stemmed;
}

const VOWEL = /[aeiouy]/;

function stem(word: string): string {
  if (word.length <= 2) return word;
  let w = word;
  // Plurals.
  if (w.endsWith('sses')) w = w.slice(0, -2);
  else if (w.endsWith('ies') && w.length > 4) w = w.slice(0, -3) + 'y';
  else if (w.endsWith('s') && w.length > 3 && !/(ss|us|is)$/.test(w)) w = w.slice(0, -1);
  // Past tense / gerund; "shipped" -> "shipp" -> "ship".
  for (const suffix of ['ing', 'ed']) {
    const base = w.slice(0, -suffix.length);
    if (w.endsWith(suffix) && base.length >= 3 && VOWEL.test(base)) {
      w = /([^aeiouslz])\1$/.test(base) ? base.slice(0, -1) : base;
      break;
    }
  }
  // A final e is dropped everywhere so "ride"/"riding" and "approve"/"approved" meet.
  if (w.endsWith('e') && w.length > 3) w = w.slice(0, -1);
  // "battery"/"batteries" and "supply"/"supplied" collapse to one form.
  if (w.endsWith('y') && w.length > 2) w = w.slice(0, -1) + 'i';
  return w;
}
