/**
 * Running a batch on an upstream that speaks OpenAI's Batch API (`batch: true`): one input
 * file rewritten line by line as each call would go upstream (the upstream's model name, the
 * brand and knowledge injected, the held output cap), one upstream batch, polled like a video
 * job; its output read back, each answered line billed by the one settle rule at the batch
 * price under its charge id, and rewritten to the gateway's model names and ids. The upstream
 * batch's id is kept in the record, so an instance that adopts the batch polls the same one;
 * the upstream batch is tagged with the gateway batch's id, so one whose creator died before
 * recording its id is found and polled too.
 */
import { lineCall } from '../../billing/batch.js';
import { plainAccount } from '../../billing/answer.js';
import { settleAnswer } from '../../billing/settle.js';
import type { Model } from '../../catalog/catalog.js';
import type { Services } from '../../services.js';
import type { ApiKeyRecord, BatchLine, BatchRecord } from '../../stores/types.js';
import { callUpstream, upstreamError, upstreamHeaders } from '../../upstream/call.js';
import { capped, type PlannedOperation } from '../text.js';
import { encodeMultipart } from '../videos/multipart.js';
import { pause } from '../../upstream/sleep.js';
import { changeBatch } from './change.js';
import { BATCH_ENDPOINTS } from './create.js';
import { finishBatch, notRunLine } from './finish.js';
import { type BatchInputLine, lineContext } from './input.js';
import { newLineId } from './views.js';

type Plan = Awaited<ReturnType<PlannedOperation['plan']>>;

export interface UpstreamRun {
  batch: BatchRecord;
  stopping(): Promise<boolean>;
  /** The record as last written here. */
  seen(b: BatchRecord): void;
}

/** The model as `upstream` serves it (its name there). */
function servedBy(model: Model, upstream: string): Model {
  const t = model.targets.find((x) => x.upstream === upstream);
  return t ? { ...model, upstream, upstreamModel: t.upstreamModel } : model;
}

async function send(core: Services, upstream: string, batchId: string, method: 'GET' | 'POST', path: string, body?: { bytes: Uint8Array; type: string }): Promise<string> {
  const res = await callUpstream(core, upstream, { method, path, headers: upstreamHeaders(batchId, body?.type), ...(body ? { body: body.bytes } : {}) });
  // Read as any failed upstream call is: its key material redacted, its wording hidden where
  // it is the gateway's business (5xx, auth), and logged; the message ends up in the batch's errors.
  if (res.status < 200 || res.status >= 300) throw await upstreamError(res, upstream, { log: core.log, requestId: batchId });
  return res.text();
}

const jsonBody = (v: unknown) => ({ bytes: new TextEncoder().encode(JSON.stringify(v)), type: 'application/json' });

/** The metadata key an upstream batch carries, naming the gateway batch it runs. */
const TAG = 'model_gateway_batch_id';
/** How far back the upstream's batches are searched for one an instance died creating. */
const MAX_LIST_PAGES = 50;
/** Upstream clocks differ from ours: a batch listed this much older than ours may still be its. */
const CLOCK_SLACK_S = 3_600;

/**
 * The upstream batch an instance created for `b` and died before recording, found by its tag
 * among the upstream's batches (listed newest first, back to `b`'s creation); null if none. A
 * listing that fails counts as none found: the batch is then created again, as before the tag.
 */
async function findSubmitted(core: Services, b: BatchRecord): Promise<string | null> {
  let after: string | null = null;
  try {
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const query: string = after === null ? '?limit=100' : `?limit=100&after=${encodeURIComponent(after)}`;
      const list = JSON.parse(await send(core, b.upstream!, b.id, 'GET', `/batches${query}`)) as { data?: unknown; has_more?: unknown };
      const data = (Array.isArray(list.data) ? list.data : []) as { id?: unknown; created_at?: unknown; metadata?: Record<string, unknown> | null }[];
      const mine = data.find((x) => x?.metadata?.[TAG] === b.id && typeof x.id === 'string');
      if (mine) return mine.id as string;
      const last = data.at(-1);
      if (list.has_more !== true || typeof last?.id !== 'string') return null;
      // Past the gateway batch's creation: every batch further down is older still.
      if (typeof last.created_at === 'number' && last.created_at < b.createdAt - CLOCK_SLACK_S) return null;
      after = last.id;
    }
  } catch (err) {
    core.log.warn({ msg: 'listing the upstream batches failed; the batch is created again', batch_id: b.id, err: err instanceof Error ? err.message : String(err) });
  }
  return null;
}

/** Uploads the rewritten input and creates the upstream batch; returns its id. */
async function submit(core: Services, b: BatchRecord, lines: BatchInputLine[], plans: Map<string, Plan>): Promise<string> {
  const upstream = b.upstream!;
  const text = lines
    .map((l) => {
      const plan = plans.get(l.customId)!;
      const body = capped(plan.fields(servedBy(plan.model, upstream)), plan.cap);
      return JSON.stringify({ custom_id: l.customId, method: 'POST', url: b.endpoint, body });
    })
    .join('\n');
  const form = await encodeMultipart({ purpose: 'batch' }, [{ name: 'file', filename: `${b.id}.jsonl`, contentType: 'application/jsonl', data: new TextEncoder().encode(`${text}\n`) }]);
  const file = JSON.parse(await send(core, upstream, b.id, 'POST', '/files', { bytes: form.body, type: form.contentType })) as { id?: unknown };
  if (typeof file.id !== 'string') throw new Error('the upstream answered its file upload without an id');
  const created = JSON.parse(
    await send(core, upstream, b.id, 'POST', '/batches', jsonBody({ input_file_id: file.id, endpoint: b.endpoint, completion_window: '24h', metadata: { [TAG]: b.id } })),
  ) as { id?: unknown };
  if (typeof created.id !== 'string') throw new Error('the upstream created its batch without an id');
  return created.id;
}

/** Reads one line of the upstream's output or error file back into the gateway's, billing an answered one. */
async function readBack(core: Services, b: BatchRecord, raw: string, plans: Map<string, Plan>, lineOf: Map<string, number>): Promise<void> {
  let rec: { custom_id?: unknown; response?: { status_code?: number; request_id?: string; body?: unknown } | null; error?: unknown };
  try {
    rec = JSON.parse(raw) as typeof rec;
  } catch {
    // One malformed line of the upstream's file: the others are still read (this one never ran, as far as the gateway can tell).
    core.log.warn({ msg: 'an upstream batch output line is not JSON', batch_id: b.id });
    return;
  }
  if (!rec || typeof rec !== 'object') return;
  const customId = typeof rec.custom_id === 'string' ? rec.custom_id : null;
  const plan = customId === null ? undefined : plans.get(customId);
  if (customId === null || !plan) return;
  let status = rec.response?.status_code ?? 0;
  let body = rec.response?.body;
  let ok = status >= 200 && status < 300 && !!body && typeof body === 'object' && !Array.isArray(body);
  if (ok) {
    const answer = body as Record<string, unknown>;
    try {
      const read = plan.answer(answer);
      const call = lineCall(core, b, customId, plan.model);
      await settleAnswer(call, plainAccount(read.usage, read.output, read.tools), { complete: true, upstream: b.upstream!, promptTokens: plan.promptTokens, tokenizer: core.tokenizer });
      // What the gateway keeps of an answer (who owns a response id) is kept, as for a direct call.
      await read.remember?.();
      // The client sees the model it named, not the upstream's name for it.
      answer.model = plan.model.id;
    } catch {
      // An answer that could not be read (or billed) is not handed over: the line fails, as a
      // direct call with a malformed answer does, and nothing of it goes out unbilled.
      ok = false;
      status = 502;
      body = { error: { message: 'The upstream sent a malformed answer.', type: 'upstream_error', code: 'upstream_error', param: null } };
    }
  }
  const id = newLineId();
  const text = JSON.stringify({ id, custom_id: customId, response: rec.response ? { status_code: status, request_id: id, body } : null, error: rec.error ?? null });
  await core.stores.batches.addLine(b.accountId, b.id, { customId, line: lineOf.get(customId) ?? 0, ok, text });
}

async function readFile(core: Services, b: BatchRecord, fileId: unknown, plans: Map<string, Plan>, lineOf: Map<string, number>): Promise<void> {
  if (typeof fileId !== 'string' || fileId === '') return;
  const text = await send(core, b.upstream!, b.id, 'GET', `/files/${encodeURIComponent(fileId)}/content`);
  for (const raw of text.split('\n')) if (raw.trim() !== '') await readBack(core, b, raw, plans, lineOf);
}

const TERMINAL = new Set(['completed', 'failed', 'expired', 'cancelled']);

export async function runUpstreamBatch(core: Services, run: UpstreamRun, key: ApiKeyRecord, lines: BatchInputLine[]): Promise<void> {
  const op = BATCH_ENDPOINTS[run.batch.endpoint]!;
  const plans = new Map<string, Plan>();
  const lineOf = new Map<string, number>();
  for (const l of lines) {
    plans.set(l.customId, await op.plan(core, lineContext(key, run.batch.endpoint, `${run.batch.id}:${l.line}`, l.body), l.body));
    lineOf.set(l.customId, l.line);
  }
  let b = run.batch;
  if (!b.upstreamBatchId) {
    // An owner that died between creating the upstream batch and recording its id left the
    // mark: that batch is found by its tag, not created (and paid for upstream) a second time.
    let upstreamId = b.upstreamSubmittedAt ? await findSubmitted(core, b) : null;
    if (upstreamId === null) {
      b = (await changeBatch(core.stores.batches, b, (x) => ({ ...x, upstreamSubmittedAt: core.now() }))) ?? b;
      run.seen(b);
      upstreamId = await submit(core, b, lines, plans);
    }
    const id = upstreamId;
    b = (await changeBatch(core.stores.batches, b, (x) => ({ ...x, upstreamBatchId: id }))) ?? b;
    run.seen(b);
  }
  const upstreamId = b.upstreamBatchId!;
  let cancelSent = false;
  while (!core.shutdown.aborted) {
    if (!cancelSent && (await run.stopping()) && !core.shutdown.aborted) {
      await send(core, b.upstream!, b.id, 'POST', `/batches/${encodeURIComponent(upstreamId)}/cancel`).catch((err: unknown) => core.log.warn({ msg: 'cancelling an upstream batch failed', batch_id: b.id, err }));
      cancelSent = true;
    }
    let up: Record<string, unknown>;
    try {
      up = JSON.parse(await send(core, b.upstream!, b.id, 'GET', `/batches/${encodeURIComponent(upstreamId)}`)) as Record<string, unknown>;
    } catch (err) {
      core.log.warn({ msg: 'polling an upstream batch failed', batch_id: b.id, err: err instanceof Error ? err.message : String(err) });
      await pause(core.cfg.limits.jobPollIntervalMs, core.shutdown);
      continue;
    }
    const status = String(up.status);
    if (TERMINAL.has(status)) {
      try {
        // Read again after a failure: a line already billed is not billed again (its hold is
        // closed), and one already recorded keeps its first record.
        await readFile(core, b, up.output_file_id, plans, lineOf);
        await readFile(core, b, up.error_file_id, plans, lineOf);
      } catch (err) {
        core.log.warn({ msg: 'reading an upstream batch output failed', batch_id: b.id, err: err instanceof Error ? err.message : String(err) });
        await pause(core.cfg.limits.jobPollIntervalMs, core.shutdown);
        continue;
      }
      if (status === 'failed' || status === 'expired') {
        const done = new Set((await core.stores.batches.lines(b.accountId, b.id)).map((l) => l.customId));
        const extra: BatchLine[] = status === 'expired' ? lines.filter((l) => !done.has(l.customId)).map((l) => notRunLine(l.customId, l.line, 'batch_expired', 'This request could not be executed before the completion window expired.')) : [];
        const finished = await finishBatch(core, b, status, extra);
        if (finished) run.seen(finished);
      }
      return;
    }
    await pause(core.cfg.limits.jobPollIntervalMs, core.shutdown);
  }
}
