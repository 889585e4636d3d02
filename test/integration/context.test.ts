/**
 * Brand voice and knowledge retrieval through the whole gateway: what the upstream receives
 * (brand message, then knowledge message, then the client's messages; never the fields
 * themselves), every error, account isolation, and the listings.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNT, MODEL, postChat, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const OTHER = 'acct_other';
const otherKey = testKey();

const RETURNS_TEXT = [
  '# Returns policy',
  'Customers may return an unused kettle within 45 days of delivery for a full refund.',
  'Refunds are paid to the original card within five business days of the parcel reaching our depot in Leeds.',
  '',
  '## Damaged goods',
  'A kettle that arrives cracked is replaced at no cost; send a photo to the support desk first.',
].join('\n');

const WARRANTY_TEXT = [
  '# Warranty',
  'Every heating element carries a seven year warranty against failure in normal domestic use.',
  'The warranty does not cover limescale damage when descaling was skipped for more than six months.',
].join('\n');

const SHIPPING_TEXT = [
  '# Shipping',
  'Orders placed before two in the afternoon leave the warehouse the same day by tracked courier.',
  'Island deliveries take one extra day.',
].join('\n');

const FOREIGN_SECRET = 'ZEBRAFOX-CONFIDENTIAL';

let upstream: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  upstream = await startTestUpstream();
  const setup = testConfig({
    upstreamUrl: upstream.url,
    accounts: [{ id: OTHER, walletUsd: 10 }],
    keys: [{ key: otherKey, account: OTHER, kind: 'developer' }],
  });
  devKey = setup.devKey;
  gw = await startGateway({
    ...setup.options,
    brands: [
      { id: 'kettleco', account: ACCOUNT, name: 'KettleCo', description: 'Makers of kettles.', voice: 'Cheerful, short sentences, British spelling.' },
      { id: 'other-brand', account: OTHER, name: 'Other', voice: 'Formal.' },
    ],
    documents: [
      { id: 'returns', account: ACCOUNT, brand: 'kettleco', title: 'Returns policy', text: RETURNS_TEXT },
      { id: 'warranty', account: ACCOUNT, brand: 'kettleco', title: 'Warranty', text: WARRANTY_TEXT },
      { id: 'shipping', account: ACCOUNT, brand: null, title: 'Shipping', text: SHIPPING_TEXT },
      {
        id: 'foreign',
        account: OTHER,
        brand: 'other-brand',
        title: 'Foreign',
        text: `Customers may return an unused kettle within 45 days. ${FOREIGN_SECRET} refunds within 45 days.`,
      },
    ],
  });
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const userMessages = [
  { role: 'system', content: 'You are a helpful support agent.' },
  { role: 'user', content: 'How many days do I have to return a kettle for a refund?' },
];

async function chat(body: Record<string, unknown>, key = devKey) {
  const before = upstream.requests.length;
  const res = await postChat(gw.baseURL, key, { model: MODEL, messages: userMessages, ...body });
  const json = (await res.json()) as Record<string, any>;
  const sent = upstream.requests.length > before ? upstream.requests[upstream.requests.length - 1]!.body : null;
  return { res, json, sent: sent as Record<string, any> | null };
}

describe('brand', () => {
  it('prepends one system message with the voice and never relays the field', async () => {
    const { res, sent } = await chat({ brand: 'kettleco' });
    expect(res.status).toBe(200);
    expect(sent).not.toBeNull();
    expect(sent!).not.toHaveProperty('brand');
    expect(sent!).not.toHaveProperty('knowledge');
    expect(sent!.messages).toHaveLength(userMessages.length + 1);
    expect(sent!.messages[0].role).toBe('system');
    expect(sent!.messages[0].content).toContain('KettleCo');
    expect(sent!.messages[0].content).toContain('Cheerful, short sentences, British spelling.');
    expect(sent!.messages.slice(1)).toEqual(userMessages);
  });

  it('404 brand_not_found for an unknown id and for another account’s brand, with no upstream call', async () => {
    for (const brand of ['nope', 'other-brand']) {
      const { res, json, sent } = await chat({ brand });
      expect(res.status).toBe(404);
      expect(json.error.code).toBe('brand_not_found');
      expect(json.error.param).toBe('brand');
      expect(sent).toBeNull();
    }
  });
});

describe('knowledge', () => {
  it('brand, then knowledge, then the client’s messages untouched', async () => {
    const { res, sent } = await chat({ brand: 'kettleco', knowledge: ['returns', 'warranty'] });
    expect(res.status).toBe(200);
    expect(sent!).not.toHaveProperty('knowledge');
    const [brandMsg, knowledgeMsg, ...rest] = sent!.messages;
    expect(brandMsg.content).toContain('KettleCo');
    expect(knowledgeMsg.role).toBe('system');
    expect(knowledgeMsg.content).toContain('[Source: Returns policy (returns)]');
    expect(knowledgeMsg.content).toContain('within 45 days of delivery');
    expect(rest).toEqual(userMessages);
  });

  it('a profile id means every document of that profile, and only those', async () => {
    const { res, sent } = await chat({
      knowledge: 'kettleco',
      messages: [{ role: 'user', content: 'Which orders leave the warehouse the same day, and what about refunds?' }],
    });
    expect(res.status).toBe(200);
    const injected = sent!.messages[0].content as string;
    expect(injected).toContain('(returns)');
    // "shipping" belongs to no profile, so the profile's knowledge never includes it.
    expect(injected).not.toContain('(shipping)');
    expect(injected).not.toContain('tracked courier');
  });

  it('uses the text parts of array content in the last user message', async () => {
    const { res, sent } = await chat({
      knowledge: ['returns', 'warranty', 'shipping'],
      messages: [
        { role: 'user', content: 'Tell me about returns.' },
        { role: 'assistant', content: 'Sure.' },
        { role: 'user', content: [{ type: 'text', text: 'What does the heating element warranty exclude?' }] },
      ],
    });
    expect(res.status).toBe(200);
    const injected = sent!.messages[0].content as string;
    expect(injected.indexOf('(warranty)')).toBeGreaterThan(-1);
    expect(injected).toContain('limescale');
  });

  it('404 knowledge_not_found for unknown or foreign ids, 400 for bad shapes; nothing reaches the upstream', async () => {
    for (const knowledge of [['returns', 'nope'], ['foreign'], 'other-brand', 'nope']) {
      const { res, json, sent } = await chat({ knowledge });
      expect(res.status, JSON.stringify(knowledge)).toBe(404);
      expect(json.error.code).toBe('knowledge_not_found');
      expect(json.error.param).toBe('knowledge');
      expect(sent).toBeNull();
    }
    const eleven = Array.from({ length: 11 }, (_, i) => `doc${i}`);
    for (const knowledge of [eleven, [], 42, { id: 'returns' }, [7]]) {
      const { res, json, sent } = await chat({ knowledge });
      expect(res.status, JSON.stringify(knowledge)).toBe(400);
      expect(json.error.code).toBe('invalid_request');
      expect(json.error.param).toMatch(/^knowledge/);
      expect(sent).toBeNull();
    }
  });

  it('never sends another account’s documents upstream', async () => {
    await chat({ knowledge: ['returns', 'warranty', 'shipping'] });
    await chat({ knowledge: 'kettleco' });
    for (const r of upstream.requests) expect(JSON.stringify(r.body)).not.toContain(FOREIGN_SECRET);
    // The other account does see its own document.
    const { res, sent } = await chat({ knowledge: ['foreign'] }, otherKey);
    expect(res.status).toBe(200);
    expect(JSON.stringify(sent)).toContain(FOREIGN_SECRET);
  });

  it('the injected text is billed as prompt tokens from the upstream usage, nothing else changes', async () => {
    const { res, json } = await chat({ knowledge: ['returns'] });
    expect(res.status).toBe(200);
    expect(json.usage.prompt_tokens).toBeGreaterThan(0);
  });
});

describe('listings', () => {
  it('GET /brands lists only the calling account’s profiles', async () => {
    const res = await fetch(`${gw.baseURL}/brands`, { headers: { authorization: `Bearer ${devKey}` } });
    const body = (await res.json()) as { object: string; data: Array<Record<string, unknown>> };
    expect(body.object).toBe('list');
    expect(body.data.map((b) => b.id)).toEqual(['kettleco']);
    expect(body.data[0]).toMatchObject({ object: 'brand', name: 'KettleCo', voice: 'Cheerful, short sentences, British spelling.' });
    expect(typeof body.data[0]!.created).toBe('number');
  });

  it('GET /knowledge lists only the calling account’s documents with passage counts', async () => {
    const res = await fetch(`${gw.baseURL}/knowledge`, { headers: { authorization: `Bearer ${devKey}` } });
    const body = (await res.json()) as { object: string; data: Array<Record<string, any>> };
    expect(body.object).toBe('list');
    expect(body.data.map((d) => d.id).sort()).toEqual(['returns', 'shipping', 'warranty']);
    const returns = body.data.find((d) => d.id === 'returns')!;
    expect(returns).toMatchObject({ object: 'knowledge.document', title: 'Returns policy', brand: 'kettleco' });
    expect(returns.bytes).toBe(Buffer.byteLength(RETURNS_TEXT));
    expect(returns.passages).toBeGreaterThanOrEqual(1);
  });

  it('a document added through the admin API is searchable on the next request (re-indexed once)', async () => {
    await gw.gateway.admin.addDocument({
      id: 'descaling',
      account: ACCOUNT,
      title: 'Descaling guide',
      text: 'Descale the kettle monthly with a citric acid sachet dissolved in half a litre of warm water.',
    });
    const { res, sent } = await chat({
      knowledge: ['descaling'],
      messages: [{ role: 'user', content: 'How do I descale with citric acid?' }],
    });
    expect(res.status).toBe(200);
    expect(sent!.messages[0].content).toContain('citric acid sachet');
    expect(await gw.gateway.admin.deleteDocument(ACCOUNT, 'descaling')).toBe(true);
    const gone = await chat({ knowledge: ['descaling'] });
    expect(gone.res.status).toBe(404);
  });
});
