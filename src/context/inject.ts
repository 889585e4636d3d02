/**
 * The two fields the gateway consumes itself, `brand` and `knowledge` (never relayed).
 * What the upstream receives: the brand's system message, then the knowledge system message,
 * then the client's messages untouched.
 *
 * Knowledge indexes are built once per account and document version (documents are split and
 * indexed when the index is built, never per request) and kept in a bounded LRU cache.
 */
import { LRUCache } from 'lru-cache';
import { contentText } from '../billing/tokens.js';
import { GatewayError } from '../errors.js';
import type { GatewayConfig } from '../options.js';
import type { BrandRecord, ContentStore, DocumentRecord, Stores } from '../stores/types.js';
import { createKnowledgeIndex, formatKnowledgeMessage, type KnowledgeIndex } from './retrieval.js';
import { shownId } from '../auth/keys.js';

export interface ContextFields {
  brand?: string | undefined;
  knowledge?: string | string[] | undefined;
}

/** The request fields the gateway reads itself (ContextFields) and never forwards upstream. */
export const CONTEXT_FIELDS = ['brand', 'knowledge'] as const;

interface AccountIndex {
  version: number;
  index: KnowledgeIndex;
  docs: Map<string, DocumentRecord>;
}

export interface ContextService {
  /** System messages to prepend (brand first, then knowledge), or null when neither field is set. */
  apply(accountId: string, req: ContextFields, messages: readonly unknown[]): Promise<unknown[] | null>;
  /** The account's index (built or reused). */
  indexFor(accountId: string): Promise<AccountIndex>;
}

export function brandMessage(brand: BrandRecord): string {
  const about = brand.description ? ` ${brand.description.trim()}` : '';
  return `You write on behalf of the brand "${brand.name || brand.id}".${about}\n\nBrand voice:\n${brand.voice.trim()}`;
}

/** Text of the last user message, including the text parts of array content. */
export function lastUserText(messages: readonly unknown[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown } | null;
    if (m && m.role === 'user') return contentText(m.content);
  }
  return '';
}

const knowledgeNotFound = (id: string) =>
  new GatewayError('knowledge_not_found', `No knowledge document or profile with id "${shownId(id)}" in this account.`, {
    param: 'knowledge',
  });

export function createContextService(
  core: { cfg: Pick<GatewayConfig, 'limits'>; stores: Pick<Stores, 'content'> },
  maxAccounts = 500,
): ContextService {
  const content: ContentStore = core.stores.content;
  const cache = new LRUCache<string, AccountIndex>({ max: maxAccounts });
  const building = new Map<string, Promise<AccountIndex>>();

  async function indexFor(accountId: string): Promise<AccountIndex> {
    const version = await content.documentsVersion(accountId);
    const cached = cache.get(accountId);
    if (cached && cached.version === version) return cached;
    const inFlight = building.get(`${accountId}@${version}`);
    if (inFlight) return inFlight;
    const build = (async () => {
      const list = await content.listDocuments(accountId);
      const index = createKnowledgeIndex();
      const docs = new Map<string, DocumentRecord>();
      for (const d of list) {
        index.addDocument({ id: d.id, title: d.title || d.id, text: d.text });
        docs.set(d.id, d);
      }
      const built = { version, index, docs };
      cache.set(accountId, built);
      return built;
    })().finally(() => building.delete(`${accountId}@${version}`));
    building.set(`${accountId}@${version}`, build);
    return build;
  }

  async function knowledgeMessage(accountId: string, knowledge: string | string[], query: string): Promise<string | null> {
    const account = await indexFor(accountId);
    let ids: Set<string>;
    if (typeof knowledge === 'string') {
      if (account.docs.has(knowledge)) ids = new Set([knowledge]);
      else {
        // A profile id: every document of that brand profile.
        const brand = await content.getBrand(accountId, knowledge);
        if (!brand) throw knowledgeNotFound(knowledge);
        ids = new Set([...account.docs.values()].filter((d) => d.brand === knowledge).map((d) => d.id));
      }
    } else {
      for (const id of knowledge) if (!account.docs.has(id)) throw knowledgeNotFound(id);
      ids = new Set(knowledge);
    }
    if (ids.size === 0 || query.trim() === '') return null;
    // The budget covers the whole message: the preamble (~25 tokens) comes out of it, and each
    // passage counts with its source line (a long title included).
    const tokenBudget = core.cfg.limits.knowledgeTokenBudget - 25;
    const passages = tokenBudget > 0 ? account.index.search(query, { documentIds: ids, tokenBudget }) : [];
    return passages.length ? formatKnowledgeMessage(passages) : null;
  }

  return {
    indexFor,
    async apply(accountId, req, messages) {
      if (req.brand === undefined && req.knowledge === undefined) return null;
      const out: unknown[] = [];
      if (req.brand !== undefined) {
        const brand = await content.getBrand(accountId, req.brand);
        if (!brand) {
          throw new GatewayError('brand_not_found', `No brand profile with id "${shownId(req.brand)}" in this account.`, {
            param: 'brand',
          });
        }
        out.push({ role: 'system', content: brandMessage(brand) });
      }
      if (req.knowledge !== undefined) {
        const text = await knowledgeMessage(accountId, req.knowledge, lastUserText(messages));
        if (text) out.push({ role: 'system', content: text });
      }
      return out;
    },
  };
}
