/** GET /models, /key, /brands, /knowledge. Not billed. */
import { nextMonthStart } from '../billing/meter.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import { GatewayError } from '../errors.js';
import { json } from '../http/json.js';
import { usdNumber } from '../billing/money.js';
import { tightestLimit } from '../billing/budgets.js';

const MEDIA_TYPES = new Set(['image', 'audio', 'video']);

export async function listModels(core: Services, ctx: RequestContext): Promise<Response> {
  const type = ctx.query.get('type');
  if (type !== null && !MEDIA_TYPES.has(type)) {
    throw new GatewayError('invalid_request', "Invalid value for 'type': expected one of image, audio, video.", {
      param: 'type',
    });
  }
  const data = core.catalog.list(ctx.key, type as 'image' | 'audio' | 'video' | null);
  return json(200, { object: 'list', data });
}

/** GET /models/{id}: the model's row as the key's listings show it (text or media), else 404. */
export async function retrieveModel(core: Services, ctx: RequestContext): Promise<Response> {
  const id = ctx.params.id ?? '';
  for (const type of [null, 'image', 'audio', 'video'] as const) {
    const row = core.catalog.list(ctx.key, type).find((m) => m.id === id);
    if (row) return json(200, row);
  }
  throw new GatewayError('model_not_found', `The model \`${id.slice(0, 200)}\` does not exist or you do not have access to it.`, {
    param: 'model',
  });
}

const seconds = (ms: number) => Math.floor(ms / 1000);

export async function readKey(core: Services, ctx: RequestContext): Promise<Response> {
  const key = ctx.key;
  const now = core.now();
  const report = await core.meter.report(key);
  const { usage, wallet } = report;
  // The tightest of the monthly cap, the key's budgets and its account's: what it can still spend.
  const tpm = key.tokensPerMinute ?? core.cfg.limits.keyTokensPerMinute;
  const limit = await tightestLimit(core.stores.billing, key, await core.accountBudgets(key.accountId), report, now);
  return json(
    200,
    {
      data: {
        id: key.id,
        label: key.label,
        kind: key.kind,
        model: key.kind === 'agent' ? key.model : null,
        usage: usdNumber(usage.total),
        usage_monthly: usdNumber(usage.monthly),
        limit: limit === null ? null : usdNumber(limit.limit),
        limit_remaining: limit === null ? null : usdNumber(limit.remaining),
        limit_reset: limit === null ? null : limit.reset,
        resets_at: (limit?.resetsAt ?? nextMonthStart(now)).toISOString(),
        wallet: { balance: usdNumber(wallet.balance), held: usdNumber(wallet.held) },
        // `tokens` only for a key with a tokens-per-minute limit.
        rate_limit: { requests: core.cfg.limits.keyRequestsPerMinute, ...(tpm === null ? {} : { tokens: tpm }), interval: '60s' },
        created_at: seconds(key.createdAt),
      },
    },
  );
}

export async function listBrands(core: Services, ctx: RequestContext): Promise<Response> {
  const brands = await core.stores.content.listBrands(ctx.key.accountId);
  const data = brands.map((b) => ({
    id: b.id,
    object: 'brand',
    name: b.name,
    description: b.description,
    voice: b.voice,
    created: seconds(b.createdAt),
  }));
  return json(200, { object: 'list', data });
}

export async function listKnowledge(core: Services, ctx: RequestContext): Promise<Response> {
  const account = await core.context.indexFor(ctx.key.accountId);
  const data = [...account.docs.values()]
    .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
    .map((d) => ({
      id: d.id,
      object: 'knowledge.document',
      title: d.title,
      brand: d.brand,
      bytes: Buffer.byteLength(d.text, 'utf8'),
      passages: account.index.passageCount(d.id),
      created: seconds(d.createdAt),
    }));
  return json(200, { object: 'list', data });
}
