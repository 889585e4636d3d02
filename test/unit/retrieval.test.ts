import { readFileSync, readdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { countTokens } from 'gpt-tokenizer';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_OVERLAP_TOKENS,
  DEFAULT_TARGET_TOKENS,
  splitIntoPassages,
  splitIntoPassagesWithTokens,
} from '../../src/context/passages.js';
import {
  KNOWLEDGE_PREAMBLE,
  createKnowledgeIndex,
  formatKnowledgeMessage,
  type KnowledgeDocument,
  type KnowledgeIndex,
} from '../../src/context/retrieval.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/knowledge/', import.meta.url));

interface Question {
  question: string;
  documentId: string;
  answer: string;
}

function loadFixtures(): { docs: KnowledgeDocument[]; questions: Question[] } {
  const docs = readdirSync(FIXTURES)
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => {
      const text = readFileSync(FIXTURES + f, 'utf8');
      return { id: f.replace(/\.md$/, ''), title: /^# (.+)$/m.exec(text)?.[1] ?? f, text };
    });
  const questions = JSON.parse(readFileSync(FIXTURES + 'questions.json', 'utf8')) as Question[];
  return { docs, questions };
}

const { docs, questions } = loadFixtures();
const allIds = docs.map((d) => d.id);
const docById = new Map(docs.map((d) => [d.id, d]));

/** Varied synthetic markdown whose sentences are individually identifiable. */
function syntheticMarkdown(): { text: string; sentences: string[]; headings: string[] } {
  const topics = ['spoke tension', 'paint cure', 'battery storage', 'dealer margin', 'frame alignment', 'tyre clearance'];
  const sentences: string[] = [];
  const headings: string[] = [];
  const blocks: string[] = [];
  let n = 0;
  for (let section = 0; section < 6; section++) {
    const heading = `## Section ${section + 1}: ${topics[section] ?? 'misc'}`;
    headings.push(heading);
    blocks.push(heading);
    for (let para = 0; para < 5; para++) {
      // Paragraph lengths vary from 2 to 22 sentences so some exceed the target.
      const count = 2 + ((section * 7 + para * 5) % 21);
      const paragraph: string[] = [];
      for (let i = 0; i < count; i++, n++) {
        const s = `Sentence ${n} explains how the ${topics[(n + para) % topics.length]} rule number ${n} applies in case ${n * 3}.`;
        paragraph.push(s);
        sentences.push(s);
      }
      blocks.push(paragraph.join(' '));
    }
  }
  return { text: blocks.join('\n\n'), sentences, headings };
}

describe('splitIntoPassages', () => {
  const { text, sentences, headings } = syntheticMarkdown();
  const passages = splitIntoPassagesWithTokens(text);
  const limit = DEFAULT_TARGET_TOKENS + 2 * DEFAULT_OVERLAP_TOKENS;

  it('packs into several passages, none much over the target', () => {
    expect(passages.length).toBeGreaterThan(5);
    for (const p of passages) {
      expect(p.tokens).toBe(countTokens(p.text));
      expect(p.tokens).toBeLessThanOrEqual(limit);
    }
    expect(splitIntoPassages(text)).toEqual(passages.map((p) => p.text));
  });

  it('keeps every sentence of the input intact in some passage', () => {
    for (const s of sentences) expect(passages.some((p) => p.text.includes(s)), s).toBe(true);
  });

  it('overlaps consecutive passages within a section by their last sentence(s)', () => {
    let overlapping = 0;
    for (let i = 1; i < passages.length; i++) {
      const current = passages[i]?.text ?? '';
      if (current.startsWith('#')) continue; // sections start fresh
      const firstSentence = /^Sentence \d+[^.]*\./.exec(current)?.[0];
      expect(firstSentence, current.slice(0, 80)).toBeDefined();
      expect(passages[i - 1]?.text.includes(firstSentence ?? '')).toBe(true);
      overlapping++;
    }
    expect(overlapping).toBeGreaterThan(3);
  });

  it('keeps headings attached to the text that follows them', () => {
    for (const h of headings) {
      const holder = passages.filter((p) => p.text.includes(h));
      expect(holder.length).toBeGreaterThan(0);
      for (const p of holder) {
        const after = p.text.slice(p.text.indexOf(h) + h.length);
        expect(after).toMatch(/^\nSentence \d+/); // never a dangling heading
      }
    }
  });

  it('splits an over-long sentence at word boundaries only', () => {
    const words = Array.from({ length: 900 }, (_, i) => `word${i}`);
    const pieces = splitIntoPassagesWithTokens(words.join(' '), { targetTokens: 100, overlapTokens: 0 });
    expect(pieces.length).toBeGreaterThan(5);
    const seen = pieces.flatMap((p) => p.text.split(/\s+/));
    expect(seen).toEqual(words); // nothing cut, nothing lost, nothing duplicated
    for (const p of pieces) expect(p.tokens).toBeLessThanOrEqual(100 + 5);
  });

  it('cuts long runs without spaces (CJK) at word boundaries and adds no spaces', () => {
    const cjk = '自転車のフレームは鋼で作られており長年にわたって使用できるように設計されています'.repeat(12);
    const pieces = splitIntoPassagesWithTokens(cjk, { targetTokens: 60, overlapTokens: 0 });
    expect(pieces.length).toBeGreaterThan(3);
    expect(pieces.map((p) => p.text).join('')).toBe(cjk);
    for (const p of pieces) expect(p.tokens).toBeLessThanOrEqual(60 + 5);
    const sentences = '自転車のフレームは鋼で作られています。長年にわたって使用できます。'.repeat(3);
    expect(splitIntoPassages(sentences)).toEqual([sentences]);
  });

  it('handles empty and tiny inputs', () => {
    expect(splitIntoPassages('')).toEqual([]);
    expect(splitIntoPassages('   \n\n  ')).toEqual([]);
    expect(splitIntoPassages('Just one line.')).toEqual(['Just one line.']);
    expect(splitIntoPassages('# Only a heading')).toEqual(['# Only a heading']);
  });

  it('keeps fenced code blocks whole', () => {
    const code = '```js\nconst a = 1;\n\nconst b = 2;\n```';
    const out = splitIntoPassages(`Intro paragraph.\n\n${code}\n\nOutro paragraph.`);
    expect(out.some((p) => p.includes(code))).toBe(true);
  });

  it('never splits a fixture answer across passages and respects the size limit', () => {
    for (const doc of docs) {
      const ps = splitIntoPassagesWithTokens(doc.text);
      for (const p of ps) expect(p.tokens).toBeLessThanOrEqual(limit);
    }
    for (const q of questions) {
      const ps = splitIntoPassages(docById.get(q.documentId)?.text ?? '');
      expect(ps.some((p) => p.includes(q.answer)), q.answer).toBe(true);
    }
  });
});

describe('knowledge fixtures', () => {
  it('has at least 20 long documents and 30 questions with unique answers', () => {
    expect(docs.length).toBeGreaterThanOrEqual(20);
    let bytes = 0;
    for (const d of docs) {
      expect(d.text.split(/\s+/).filter(Boolean).length, d.id).toBeGreaterThanOrEqual(2500);
      bytes += statSync(`${FIXTURES}${d.id}.md`).size;
    }
    expect(bytes).toBeLessThan(2 * 1024 * 1024);
    expect(questions.length).toBeGreaterThanOrEqual(30);
    const corpus = docs.map((d) => d.text.toLowerCase());
    for (const q of questions) {
      const needle = q.answer.toLowerCase();
      const occurrences = corpus.reduce((n, t) => n + t.split(needle).length - 1, 0);
      expect(occurrences, q.answer).toBe(1);
      expect(docById.get(q.documentId)?.text.includes(q.answer), q.answer).toBe(true);
    }
  });
});

describe('createKnowledgeIndex', () => {
  let index: KnowledgeIndex;

  beforeAll(() => {
    index = createKnowledgeIndex();
    for (const d of docs) expect(index.addDocument(d)).toBeGreaterThan(5);
  });

  it('counts passages per document and in total', () => {
    const sum = allIds.reduce((n, id) => n + index.passageCount(id), 0);
    expect(index.passageCount()).toBe(sum);
    expect(index.passageCount('no-such-doc')).toBe(0);
    expect(index.documentIds().sort()).toEqual([...allIds].sort());
  });

  it('never returns passages of documents outside documentIds', () => {
    for (const [i, q] of questions.entries()) {
      const others = allIds.filter((id) => id !== q.documentId);
      const chosen = [others[i % others.length], others[(i + 5) % others.length]] as string[];
      const asArray = index.search(q.question, { documentIds: chosen, tokenBudget: 1500 });
      const asSet = index.search(q.question, { documentIds: new Set(chosen), tokenBudget: 1500 });
      expect(asSet).toEqual(asArray);
      for (const r of asArray) expect(chosen).toContain(r.documentId);
    }
    expect(index.search(questions[0]?.question ?? '', { documentIds: [], tokenBudget: 1500 })).toEqual([]);
    expect(index.search(questions[0]?.question ?? '', { documentIds: ['nope'], tokenBudget: 1500 })).toEqual([]);
  });

  it('keeps the total within the token budget and honours maxPassages', () => {
    for (const budget of [0, 40, 150, 400, 1500, 4000]) {
      for (const q of questions.slice(0, 10)) {
        const res = index.search(q.question, { tokenBudget: budget, maxPassages: 12 });
        const total = res.reduce((n, r) => n + r.tokens, 0);
        expect(total).toBeLessThanOrEqual(budget);
        expect(res.length).toBeLessThanOrEqual(12);
        for (const r of res) expect(r.tokens).toBe(countTokens(r.text));
        for (let i = 1; i < res.length; i++) expect(res[i - 1]!.score).toBeGreaterThanOrEqual(res[i]!.score);
      }
    }
    expect(index.search(questions[0]?.question ?? '', { tokenBudget: 1500, maxPassages: 2 }).length).toBeLessThanOrEqual(2);
  });

  it('counts each passage with its source line: the message stays within the budget however long the titles', () => {
    const long = createKnowledgeIndex();
    const title = (i: number) => `Kettle care guide volume ${i}: ${Array.from({ length: 60 }, (_, j) => `section${i}x${j}`).join(' ')}`.slice(0, 500);
    for (let i = 0; i < 8; i++) {
      long.addDocument({ id: `care-${i}`, title: title(i), text: `Descale the kettle every month with citric acid; rinse twice before boiling water again. Guide ${i}.` });
    }
    const preamble = countTokens(`${KNOWLEDGE_PREAMBLE}\n\n`);
    for (const budget of [200, 400, 1500]) {
      const res = long.search('How often should I descale the kettle with citric acid?', { tokenBudget: budget });
      expect(res.length).toBeGreaterThan(0);
      expect(countTokens(formatKnowledgeMessage(res)) - preamble).toBeLessThanOrEqual(budget);
    }
  });

  it('copes with a huge pasted message', () => {
    const q = questions[5]!;
    const pasted = `${docs.map((d) => d.text).join('\n\n')}\n\n${q.question}`;
    const res = index.search(pasted, { tokenBudget: 1500, documentIds: [q.documentId, allIds[0]!] });
    expect(res.length).toBeGreaterThan(0);
    expect(res.reduce((n, r) => n + r.tokens, 0)).toBeLessThanOrEqual(1500);
    for (const r of res) expect([q.documentId, allIds[0]]).toContain(r.documentId);
  });

  it('returns nothing for queries without indexed terms', () => {
    expect(index.search('', { tokenBudget: 1500 })).toEqual([]);
    expect(index.search('what is the of and to?', { tokenBudget: 1500 })).toEqual([]);
    expect(index.search('zzyzx qwxv', { tokenBudget: 1500 })).toEqual([]);
  });

  it('removes and re-adds documents', () => {
    const local = createKnowledgeIndex();
    for (const d of docs) local.addDocument(d);
    const q = questions[0]!;
    const before = local.passageCount();
    const own = local.passageCount(q.documentId);
    expect(local.search(q.question, { tokenBudget: 1500 }).some((r) => r.documentId === q.documentId)).toBe(true);

    local.removeDocument(q.documentId);
    expect(local.passageCount(q.documentId)).toBe(0);
    expect(local.passageCount()).toBe(before - own);
    expect(local.documentIds()).not.toContain(q.documentId);
    for (const question of questions) {
      const res = local.search(question.question, { tokenBudget: 1500 });
      expect(res.every((r) => r.documentId !== q.documentId)).toBe(true);
    }
    local.removeDocument(q.documentId); // idempotent
    local.removeDocument('never-added');

    const doc = docById.get(q.documentId)!;
    expect(local.addDocument(doc)).toBe(own);
    expect(local.addDocument({ ...doc, title: 'Renamed' })).toBe(own); // same id replaces
    expect(local.passageCount()).toBe(before);
    const res = local.search(q.question, { tokenBudget: 1500 });
    expect(res.some((r) => r.documentId === q.documentId && r.title === 'Renamed' && r.text.includes(q.answer))).toBe(true);
  });

  function recall(search: (q: Question) => Array<{ text: string }>): { hits: number; misses: string[] } {
    const misses: string[] = [];
    for (const q of questions) if (!search(q).some((r) => r.text.includes(q.answer))) misses.push(q.question);
    return { hits: questions.length - misses.length, misses };
  }

  it('finds the answering passage for >= 90% of questions across all documents', () => {
    const { hits, misses } = recall((q) => index.search(q.question, { documentIds: allIds, tokenBudget: 1500 }));
    const value = hits / questions.length;
    console.log(`recall (all ${docs.length} documents, budget 1500): ${hits}/${questions.length} = ${value.toFixed(3)}`);
    if (misses.length) console.log(`  missed: ${misses.join(' | ')}`);
    expect(value).toBeGreaterThanOrEqual(0.9);
  });

  it('finds the answering passage for >= 90% of questions within the right document', () => {
    const { hits, misses } = recall((q) => index.search(q.question, { documentIds: [q.documentId], tokenBudget: 1500 }));
    const value = hits / questions.length;
    console.log(`recall (right document only, budget 1500): ${hits}/${questions.length} = ${value.toFixed(3)}`);
    if (misses.length) console.log(`  missed: ${misses.join(' | ')}`);
    expect(value).toBeGreaterThanOrEqual(0.9);
  });

  it('keeps recall and restriction when the two-pass query plan kicks in', () => {
    // A tiny result budget forces the rare-terms-first candidate pass on this small corpus.
    const twoPass = createKnowledgeIndex({ resultBudget: 20 });
    for (const d of docs) twoPass.addDocument(d);
    const { hits } = recall((q) => twoPass.search(q.question, { tokenBudget: 1500 }));
    console.log(`recall (two-pass plan, all documents): ${hits}/${questions.length}`);
    expect(hits / questions.length).toBeGreaterThanOrEqual(0.9);
    const half = new Set(allIds.slice(0, 10));
    for (const q of questions) {
      for (const r of twoPass.search(q.question, { documentIds: half, tokenBudget: 1500 })) {
        expect(half.has(r.documentId)).toBe(true);
      }
    }
  });
});

describe('formatKnowledgeMessage', () => {
  it('produces one deterministic system message naming each source', () => {
    const message = formatKnowledgeMessage([
      { documentId: 'warranty-policy', title: 'Warranty Policy', text: 'Frames carry a lifetime warranty.\n' },
      { documentId: 'doc 2', title: 'Bad\nTitle', text: 'Second excerpt.' },
    ]);
    expect(message).toBe(
      `${KNOWLEDGE_PREAMBLE}\n\n` +
        '[Source: Warranty Policy (warranty-policy)]\nFrames carry a lifetime warranty.\n\n' +
        '[Source: Bad Title (doc 2)]\nSecond excerpt.',
    );
    expect(KNOWLEDGE_PREAMBLE).toBe(
      "Use the following excerpts from the account's knowledge base when they are relevant. " +
        'Each excerpt names its source document.',
    );
    expect(formatKnowledgeMessage([])).toBe(KNOWLEDGE_PREAMBLE);
  });
});
