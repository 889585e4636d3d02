/**
 * `POST /v1/batches`: the batch is created synchronously, after every line of its input file
 * was read and planned as the same call made directly would be (its model, its fields, the
 * key's right to the model, its worst case): a bad line refuses the whole batch (400 naming
 * the line; 403 for a model the key may not use) and nothing goes upstream. Then the sum of
 * the lines' worst cases at the batch price is held (402 when it does not fit) and the batch
 * starts running.
 */
import { BATCH_WINDOW_MS, heldPricesOf, holdBatch } from '../../billing/batch.js';
import { tokenHoldCost } from '../../billing/billed-call.js';
import { atBatchPrice, type Model } from '../../catalog/catalog.js';
import { GatewayError, isGatewayError } from '../../errors.js';
import { json, parseJsonObject } from '../../http/json.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import type { BatchRecord, HeldTextPrices } from '../../stores/types.js';
import { chatCompletions } from '../chat.js';
import { createCompletion } from '../completions.js';
import { createEmbeddings } from '../embeddings.js';
import { createResponse } from '../responses.js';
import { asksPricedTier } from '../shared.js';
import type { PlannedOperation } from '../text.js';
import { type BatchInputLine, lineContext, lineError, readBatchInput, slicer } from './input.js';
import { batchView, newBatchId } from './views.js';
import { liveFileContent } from './files.js';
import { shownId } from '../../auth/keys.js';

/** The endpoints a batch may run, as OpenAI names them. */
export const BATCH_ENDPOINTS: Readonly<Record<string, PlannedOperation>> = {
  '/v1/chat/completions': chatCompletions,
  '/v1/completions': createCompletion,
  '/v1/responses': createResponse,
  '/v1/embeddings': createEmbeddings,
};

interface PlannedLine {
  model: Model;
  /** The worst case at the batch price, on the prompt's byte bound and on its counted estimate. */
  bound: bigint;
  estimate: () => bigint;
}

/** Plans one line as its call would be planned; its refusal becomes the batch's, naming the line. */
async function planLine(core: Services, ctx: RequestContext, op: PlannedOperation, endpoint: string, l: BatchInputLine): Promise<PlannedLine> {
  // A line is billed at the batch price: a tier the provider bills at another price (and a line
  // the gateway runs itself would ask for) cannot be held or charged right. Refused here, at
  // creation only: a batch created before this rule still runs as it was accepted.
  if (asksPricedTier(l.body.service_tier)) {
    throw lineError(l.line, "a line of a batch runs at the batch price: 'service_tier' may only ask for the standard price ('auto', 'default', 'standard_only').");
  }
  let plan: Awaited<ReturnType<PlannedOperation['plan']>>;
  try {
    plan = await op.plan(core, lineContext(ctx.key, endpoint, `${ctx.requestId}:${l.line}`, l.body), l.body);
  } catch (err) {
    if (!isGatewayError(err)) throw err;
    // Only an agent key naming another model is a 403; any other model the key may not use
    // (its allow-list, a model on request without the grant) is a bad line like the rest.
    if (err.status === 403 && ctx.key.kind === 'agent' && err.code === 'model_not_allowed') throw lineError(l.line, err.message, 403, err.code);
    if (err.status >= 500) throw err;
    throw lineError(l.line, err.message);
  }
  const model = atBatchPrice(plan.model);
  const { hold } = plan;
  const cost = (prompt: number) => tokenHoldCost(model, hold, prompt);
  return { model: plan.model, bound: cost(hold.bound), estimate: () => cost(hold.estimate()) };
}

/** The batch prices of `models` now, each once: what the batch's lines are held, and billed, at. */
function heldPrices(models: readonly Model[]): Record<string, HeldTextPrices> {
  const out: Record<string, HeldTextPrices> = {};
  for (const m of models) {
    if (Object.hasOwn(out, m.id)) continue;
    const prices = heldPricesOf(m);
    if (prices) out[m.id] = prices;
  }
  return out;
}

/**
 * The upstream with a Batch API that serves every line's model first, if one does. An upstream
 * batch skips what the gateway does to each call on its way (the guardrails, the plugins' say
 * on the body and the answer): with any of those covering the batch, its lines run here,
 * through the ordinary path, instead.
 */
function batchUpstream(core: Services, ctx: RequestContext, endpoint: string, models: Model[]): string | null {
  const path = endpoint.replace(/^\/v1/, '');
  if (core.guardrails.any || core.hooks.has('onUpstreamRequest') || models.some((m) => core.guardrails.output(ctx, m, path) !== null)) return null;
  const names = new Set(models.map((m) => m.targets[0]?.upstream ?? m.upstream));
  if (names.size !== 1) return null;
  const name = [...names][0];
  const u = name === undefined ? undefined : core.cfg.upstreams[name];
  return u && typeof u === 'object' && 'batch' in u && u.batch === true ? (name ?? null) : null;
}

function readMetadata(v: unknown): Record<string, string> | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) throw new GatewayError('invalid_request', 'metadata must be an object of strings.', { param: 'metadata' });
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > 16 || entries.some(([k, s]) => typeof s !== 'string' || k.length > 64 || s.length > 512)) {
    throw new GatewayError('invalid_request', 'metadata takes at most 16 keys of up to 64 characters, each with a string of up to 512.', { param: 'metadata' });
  }
  // Kept with the batch: NUL is refused here (PostgreSQL cannot store it), not met as a store failure.
  if (entries.some(([k, s]) => k.includes('\u0000') || (s as string).includes('\u0000'))) {
    throw new GatewayError('invalid_request', 'metadata keys and values must not contain NUL.', { param: 'metadata' });
  }
  return Object.fromEntries(entries) as Record<string, string>;
}

export async function createBatch(core: Services, ctx: RequestContext): Promise<Response> {
  const fields = parseJsonObject(await ctx.body());
  const { input_file_id: inputFileId, endpoint, completion_window: window } = fields;
  if (typeof inputFileId !== 'string' || inputFileId === '') throw new GatewayError('invalid_request', 'input_file_id is required.', { param: 'input_file_id' });
  if (typeof endpoint !== 'string' || !BATCH_ENDPOINTS[endpoint]) {
    throw new GatewayError('invalid_request', `endpoint must be one of ${Object.keys(BATCH_ENDPOINTS).join(', ')}.`, { param: 'endpoint' });
  }
  if (window !== '24h') throw new GatewayError('invalid_request', "completion_window must be '24h'.", { param: 'completion_window' });
  const metadata = readMetadata(fields.metadata);
  const op = BATCH_ENDPOINTS[endpoint]!;
  const file = await liveFileContent(core, ctx.key.accountId, inputFileId);
  if (!file) throw new GatewayError('not_found', `No such File object: ${shownId(inputFileId)}`, { param: 'input_file_id' });
  const lines = await readBatchInput(file, endpoint, true);
  const planned: PlannedLine[] = [];
  const pause = slicer();
  for (const l of lines) {
    planned.push(await planLine(core, ctx, op, endpoint, l));
    const paused = pause();
    if (paused) await paused;
  }

  let id = newBatchId();
  const models = planned.map((p) => p.model);
  const counts = new Map<string, number>();
  for (const m of models) counts.set(m.id, (counts.get(m.id) ?? 0) + 1);
  const main = [...counts].sort((a, b) => b[1] - a[1])[0]![0];
  const model = models.find((m) => m.id === main)!;
  // Until the batch is recorded, nothing would release a line's hold if this instance died: it
  // lives the ordinary hold TTL, and is made to last the batch's window when the batch runs.
  const terms = { ttlMs: core.cfg.limits.holdTtlMs, store: core.stores.billing, now: core.now };
  const byBound = new Map(lines.map((l, i) => [l.customId, planned[i]!.bound]));
  let held = [...byBound.values()].reduce((sum, a) => sum + a, 0n);
  try {
    await holdBatch(core, ctx, id, model, byBound, terms);
  } catch (err) {
    // The byte bound of the prompts was refused: the counted prompts decide, as for one call.
    const byEstimate = new Map(lines.map((l, i) => [l.customId, planned[i]!.estimate()]));
    const estimate = [...byEstimate.values()].reduce((sum, a) => sum + a, 0n);
    if (!(isGatewayError(err) && err.status === 402) || estimate >= held) throw err;
    // Under a new id: the refused attempt's released holds closed their ids, and a line
    // settled on a closed id would be charged nothing.
    id = newBatchId();
    await holdBatch(core, ctx, id, model, byEstimate, terms);
    held = estimate;
  }
  const now = Math.floor(core.now() / 1000);
  const batch: BatchRecord = {
    id,
    accountId: ctx.key.accountId,
    keyId: ctx.key.id,
    endpoint,
    inputFileId,
    completionWindow: '24h',
    status: 'in_progress',
    createdAt: now,
    inProgressAt: now,
    finalizingAt: null,
    completedAt: null,
    failedAt: null,
    expiredAt: null,
    cancellingAt: null,
    cancelledAt: null,
    expiresAt: now + BATCH_WINDOW_MS / 1000,
    outputFileId: null,
    errorFileId: null,
    errors: null,
    requestCounts: { total: lines.length, completed: 0, failed: 0 },
    metadata,
    model: main,
    held: String(held),
    prices: heldPrices(planned.map((p) => p.model)),
    upstream: batchUpstream(core, ctx, endpoint, models),
    upstreamBatchId: null,
    // This instance runs it first; another adopts it once this one stops renewing it.
    owner: core.jobs.instanceId,
    ownerUntil: core.jobs.ownerUntil(),
    rev: 0,
  };
  try {
    await core.stores.batches.createBatch(batch);
  } catch (err) {
    await core.batches.release(batch, lines.map((l) => l.customId));
    throw err;
  }
  core.batches.start(batch);
  return json(200, batchView(batch));
}
