/**
 * In-memory knowledge retrieval: documents are split into passages once, at
 * add time, and ranked per query with MiniSearch (BM25+). Pure: no I/O.
 *
 * Restriction to a set of documents happens inside MiniSearch's scoring loop
 * (`boostDocument` returning 0 skips a passage before it is scored or
 * collected), so a request limited to a few documents stays cheap even when
 * the index holds tens of thousands of passages.
 */
import MiniSearch from 'minisearch';
import { splitIntoPassagesWithTokens, type SplitOptions } from './passages.js';

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
  /** Upper bound on the sum of `tokens` of the returned passages. */
  tokenBudget: number;
  /** Default 8. */
  maxPassages?: number;
}

export interface KnowledgeIndex {
  /** Splits and indexes the document (replacing one with the same id); returns its passage count. */
  addDocument(doc: KnowledgeDocument): number;
  removeDocument(id: string): void;
  search(query: string, opts: KnowledgeSearchOptions): RetrievedPassage[];
  passageCount(documentId?: string): number;
  documentIds(): string[];
}

export const DEFAULT_MAX_PASSAGES = 8;
/** Long pasted messages are cut to this many distinct terms to bound query cost. */
export const MAX_QUERY_TERMS = 64;
/** How far down the ranking we look for passages that still fit the budget. */
const MAX_CANDIDATES_SCANNED = 50;

interface PassageRecord {
  documentId: string;
  title: string;
  text: string;
  tokens: number;
}

interface IndexedPassage {
  id: number;
  title: string;
  text: string;
}

export function createKnowledgeIndex(opts: { split?: SplitOptions } = {}): KnowledgeIndex {
  const miniSearch = new MiniSearch<IndexedPassage>({
    fields: ['text', 'title'],
    storeFields: [],
    processTerm: analyzeTerm,
    searchOptions: { boost: { title: 0.5 } },
  });
  // Passage ids are array slots; removed passages leave a hole (never reused).
  const passages: Array<PassageRecord | undefined> = [];
  const documents = new Map<string, { passageIds: number[] }>();

  function removeDocument(id: string): void {
    const doc = documents.get(id);
    if (!doc) return;
    for (const passageId of doc.passageIds) {
      miniSearch.discard(passageId); // lazy removal; MiniSearch vacuums in the background
      passages[passageId] = undefined;
    }
    documents.delete(id);
  }

  function addDocument(doc: KnowledgeDocument): number {
    removeDocument(doc.id);
    const split = splitIntoPassagesWithTokens(doc.text, opts.split);
    const passageIds: number[] = [];
    const batch: IndexedPassage[] = [];
    for (const p of split) {
      const id = passages.length;
      passages.push({ documentId: doc.id, title: doc.title, text: p.text, tokens: p.tokens });
      passageIds.push(id);
      batch.push({ id, title: doc.title, text: p.text });
    }
    miniSearch.addAll(batch);
    documents.set(doc.id, { passageIds });
    return passageIds.length;
  }

  function search(query: string, searchOpts: KnowledgeSearchOptions): RetrievedPassage[] {
    const maxPassages = searchOpts.maxPassages ?? DEFAULT_MAX_PASSAGES;
    if (searchOpts.tokenBudget <= 0 || maxPassages <= 0) return [];
    const allowed = restriction(searchOpts.documentIds);
    if (allowed && allowed.size === 0) return [];
    const terms = queryTerms(query);
    if (terms.length === 0) return [];

    const hits = miniSearch.search(terms.join(' '), {
      // Terms are already analysed: skip MiniSearch's own tokenise/process step.
      tokenize: (s) => s.split(' '),
      processTerm: (t) => t,
      boostDocument: allowed
        ? (id: number) => (allowed.has(passages[id]?.documentId ?? '') ? 1 : 0)
        : undefined,
    });

    const out: RetrievedPassage[] = [];
    let budget = searchOpts.tokenBudget;
    const scanned = Math.min(hits.length, MAX_CANDIDATES_SCANNED);
    for (let i = 0; i < scanned && out.length < maxPassages; i++) {
      const hit = hits[i];
      const p = hit ? passages[hit.id as number] : undefined;
      if (!hit || !p || p.tokens > budget) continue; // a smaller, lower-ranked one may still fit
      out.push({ documentId: p.documentId, title: p.title, text: p.text, score: hit.score, tokens: p.tokens });
      budget -= p.tokens;
    }
    return out;
  }

  /** undefined = no restriction needed (nothing given, or every indexed document allowed). */
  function restriction(ids: ReadonlySet<string> | string[] | undefined): ReadonlySet<string> | undefined {
    if (ids === undefined) return undefined;
    const set: ReadonlySet<string> = Array.isArray(ids) ? new Set(ids) : (ids as ReadonlySet<string>);
    let covered = 0;
    for (const id of set) if (documents.has(id)) covered++;
    if (covered === documents.size) return undefined;
    return covered === 0 ? new Set() : set;
  }

  return {
    addDocument,
    removeDocument,
    search,
    passageCount: (documentId) =>
      documentId === undefined ? miniSearch.documentCount : (documents.get(documentId)?.passageIds.length ?? 0),
    documentIds: () => [...documents.keys()],
  };
}

/** Distinct analysed query terms, capped so a huge pasted message cannot blow the latency budget. */
function queryTerms(query: string): string[] {
  const seen = new Set<string>();
  for (const raw of MiniSearch.getDefault('tokenize')(query) as string[]) {
    const term = analyzeTerm(raw);
    if (term && !seen.has(term)) {
      seen.add(term);
      if (seen.size >= MAX_QUERY_TERMS) break;
    }
  }
  return [...seen];
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
 * Passages keep the order given (best first). Line breaks in titles/ids are
 * flattened so a source line cannot be forged by a document title.
 */
export function formatKnowledgeMessage(
  passages: ReadonlyArray<Pick<RetrievedPassage, 'documentId' | 'title' | 'text'>>,
): string {
  const flat = (s: string): string => s.replace(/\s+/g, ' ').trim();
  const parts = passages.map((p) => `[Source: ${flat(p.title)} (${flat(p.documentId)})]\n${p.text.trim()}`);
  return [KNOWLEDGE_PREAMBLE, ...parts].join('\n\n');
}

// ---------------------------------------------------------------------------
// Term analysis, shared by indexing and querying: lower-case, drop stop words
// and one-letter fragments, then a light Porter-style suffix strip (plurals,
// -ed/-ing, final e, trailing y) so "batteries"/"battery" and "ships"/"shipped" meet.

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

export function analyzeTerm(raw: string): string | null {
  const term = raw.toLowerCase().replace(/['’]s$/, '').replace(/['’]/g, '');
  if (term.length < 2 && !/\d/.test(term)) return null;
  if (STOP_WORDS.has(term)) return null;
  return /\d/.test(term) ? term : stem(term);
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
