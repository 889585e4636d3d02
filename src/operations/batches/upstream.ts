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
import { lineCall, releaseBatchLines } from '../../billing/batch.js';
import { plainAccount } from '../../billing/answer.js';
import { settleAnswer } from '../../billing/settle.js';
import type { Model } from '../../catalog/catalog.js';
import type { Services } from '../../services.js';
import type { ApiKeyRecord, BatchLine, BatchRecord } from '../../stores/types.js';
import { errors, type GatewayError, isGatewayError } from '../../errors.js';
import { upstreamError, upstreamErrorOf } from '../../upstream/answer-errors.js';
import { callUpstream, upstreamHeaders } from '../../upstream/call.js';
import { redactedDeep, upstreamKeysRedactor } from '../../upstream/key-redactor.js';
import { capped, type PlannedOperation } from '../text.js';
import { encodeMultipart } from '../videos/multipart.js';
import { pause } from '../../upstream/sleep.js';
import { changeBatch } from './change.js';
import { BATCH_ENDPOINTS } from './create.js';
import { answeredLine, finishBatch, notRunLine } from './finish.js';
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

/** How many times a listing that fails is tried (a poll interval apart) before the batch is created anyway. */
const LIST_TRIES = 5;

/**
 * The upstream batch an instance created for `b` and died before recording, found by its tag
 * among the upstream's batches (listed newest first, back to `b`'s creation): its id, null when
 * there is none, undefined when the listing could not tell (it failed, or ran past its pages).
 */
async function findSubmitted(core: Services, b: BatchRecord): Promise<string | null | undefined> {
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
    core.log.warn({ msg: `the upstream's batches were listed ${MAX_LIST_PAGES} pages back without reaching this batch's creation`, batch_id: b.id });
  } catch (err) {
    core.log.warn({ msg: 'listing the upstream batches failed', batch_id: b.id, err: err instanceof Error ? err.message : String(err) });
  }
  return undefined;
}

/**
 * The upstream batch an owner that died created for `b` without recording it: null when none
 * was (or none is found), undefined when the upstream's listing could not tell, a few tries
 * (a poll interval apart) over, or when this instance is stopping.
 */
async function submittedBefore(core: Services, b: BatchRecord): Promise<string | null | undefined> {
  if (!b.upstreamSubmittedAt) return null;
  for (let tries = 0; tries < LIST_TRIES; tries++) {
    const found = await findSubmitted(core, b);
    if (found !== undefined) return found;
    await pause(core.cfg.limits.jobPollIntervalMs, core.stopping);
    if (core.stopping.aborted) return undefined;
  }
  return undefined;
}

/**
 * The record with its upstream batch: the one recorded, the one an owner that died created
 * (found by its tag), or a new one. A listing that cannot tell is tried again a few times, then
 * the batch is created (an upstream without a listing would otherwise never run it). Two
 * instances that both created one keep the one recorded first; the other is cancelled.
 */
async function withUpstreamBatch(core: Services, run: UpstreamRun, lines: BatchInputLine[], plans: Map<string, Plan>): Promise<{ b: BatchRecord; sentHere: boolean } | null> {
  let b = run.batch;
  if (b.upstreamBatchId) return { b, sentHere: false };
  const found = await submittedBefore(core, b);
  if (core.stopping.aborted) return null;
  let id = found ?? null;
  let submitted = false;
  // Cancelled (or expired, or this instance stopping) before any upstream batch exists: none
  // is created, so nothing runs upstream for a batch that was told to stop.
  if (id === null && (await run.stopping())) return null;
  if (id === null) {
    b = (await changeBatch(core.stores.batches, b, (x) => (x.upstreamBatchId ? null : { ...x, upstreamSubmittedAt: core.now() }))) ?? b;
    run.seen(b);
    if (b.upstreamBatchId) return { b, sentHere: false };
    id = await submit(core, b, lines, plans);
    submitted = true;
  }
  const mine = id;
  b = (await changeBatch(core.stores.batches, b, (x) => (x.upstreamBatchId ? null : { ...x, upstreamBatchId: mine }))) ?? b;
  run.seen(b);
  if (b.upstreamBatchId !== mine) {
    // Another instance recorded its own meanwhile (this one's lease lapsed while it created),
    // or the record is gone: this one's upstream batch would run for nobody.
    await cancelForGood(core, b, mine);
    if (!b.upstreamBatchId) throw new Error('the batch record is gone');
  }
  return { b, sentHere: submitted && b.upstreamBatchId === mine };
}

/** Asks the upstream once to cancel one of its batches; false (logged) when it did not take the cancel. */
async function cancelUpstream(core: Services, b: BatchRecord, upstreamId: string): Promise<boolean> {
  try {
    await send(core, b.upstream!, b.id, 'POST', `/batches/${encodeURIComponent(upstreamId)}/cancel`);
    return true;
  } catch (err) {
    core.log.warn({ msg: 'cancelling an upstream batch failed', batch_id: b.id, upstream_batch_id: upstreamId, err: err instanceof Error ? err.message : String(err) });
    return false;
  }
}

/**
 * Cancels an upstream batch nobody will read, tried a few times (a poll interval apart) while
 * this instance runs: one left running is paid for upstream, line by line, for nothing.
 */
async function cancelForGood(core: Services, b: BatchRecord, upstreamId: string): Promise<void> {
  for (let tries = 1; !(await cancelUpstream(core, b, upstreamId)) && tries < CANCEL_TRIES && !core.stopping.aborted; tries++) {
    await pause(core.cfg.limits.jobPollIntervalMs, core.stopping);
  }
}

/** How many times an upstream batch nobody will read is asked to cancel before it is left to run. */
const CANCEL_TRIES = 5;

/** Cancels the upstream batch of a gateway batch that ends without reading it (its input or its key is gone). */
export async function abandonUpstreamBatch(core: Services, b: BatchRecord): Promise<void> {
  if (b.upstream && b.upstreamBatchId) await cancelForGood(core, b, b.upstreamBatchId);
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
  if (!ok && rec.response) {
    // A line the upstream refused reads as the same call refused directly: its own words with no
    // upstream key material in them, or the gateway's for the upstream's own failure.
    const err = status >= 400 ? upstreamErrorOf(status, typeof body === 'string' ? body : JSON.stringify(body ?? ''), b.upstream!, upstreamKeysRedactor(core.cfg)) : errors.malformedAnswer(b.upstream!);
    status = err.status;
    body = err.toJSON();
  }
  if (ok) {
    const answer = body as Record<string, unknown>;
    try {
      const read = plan.answer(answer);
      const call = lineCall(core, b, customId, plan.model);
      await settleAnswer(call, { ...plainAccount(read.usage, read.output, read.tools), failed: () => read.failed === true }, { complete: true, upstream: b.upstream!, promptTokens: plan.promptTokens, tokenizer: core.tokenizer });
      // What the gateway keeps of an answer (who owns a response id) is kept, as for a direct
      // call. Billed already, the line is answered even when that fails (recorded as failed,
      // the batch's end would release a hold its kept settle may still have to close).
      await read.remember?.().catch((err: unknown) =>
        core.log.warn({ msg: 'a batch line’s response id could not be recorded; it cannot be continued', batch_id: b.id, custom_id: customId, err: String(err) }),
      );
      // The client sees the model it named, not the upstream's name for it; a failed answer's
      // error carries no upstream key material.
      answer.model = plan.model.id;
      if (read.failed && answer.error) answer.error = redactedDeep(answer.error, upstreamKeysRedactor(core.cfg));
    } catch {
      // An answer that could not be read (or billed) is not handed over: the line fails, as a
      // direct call with a malformed answer does, and nothing of it goes out unbilled.
      ok = false;
      status = 502;
      body = { error: { message: 'The upstream sent a malformed answer.', type: 'upstream_error', code: 'upstream_error', param: null } };
    }
  }
  const id = newLineId();
  // The line's own error is the upstream's words too: no upstream key material in it.
  const error = rec.error ? redactedDeep(rec.error, upstreamKeysRedactor(core.cfg)) : null;
  const text = JSON.stringify({ id, custom_id: customId, response: rec.response ? { status_code: status, request_id: id, body } : null, error });
  await core.stores.batches.addLine(b.accountId, b.id, { customId, line: lineOf.get(customId) ?? 0, ok, text });
}

/**
 * The client's line number of the upstream batch's k-th input line (1-based; null when unknown):
 * the lines this run sent, in order, or, for a batch an earlier run sent (which may have sent
 * other lines, the catalog having changed since), the custom ids of the upstream's copy of the
 * input, when the upstream lets it be read.
 */
async function sentLines(core: Services, b: BatchRecord, up: Record<string, unknown>, sent: BatchInputLine[] | null, lineOf: Map<string, number>): Promise<(k: number) => number | null> {
  if (sent) return (k) => sent[k - 1]?.line ?? null;
  const fileId = up.input_file_id;
  if (typeof fileId !== 'string' || fileId === '') return () => null;
  try {
    const ids = (await send(core, b.upstream!, b.id, 'GET', `/files/${encodeURIComponent(fileId)}/content`))
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => {
        try {
          const id = (JSON.parse(l) as { custom_id?: unknown }).custom_id;
          return typeof id === 'string' ? id : null;
        } catch {
          return null;
        }
      });
    return (k) => lineOf.get(ids[k - 1] ?? '') ?? null;
  } catch (err) {
    core.log.warn({ msg: 'the upstream batch input could not be read back: its errors name no line', batch_id: b.id, err: err instanceof Error ? err.message : String(err) });
    return () => null;
  }
}

/** An upstream batch's `errors.data` as the gateway's batch keeps them; one entry saying so when it gave none. */
/** An upstream batch's `errors.data`, when it gave a list. */
const errorData = (up: Record<string, unknown>): unknown[] | null => {
  const data = (up.errors as { data?: unknown } | null | undefined)?.data;
  return Array.isArray(data) ? data : null;
};

function upstreamErrors(core: Services, up: Record<string, unknown>, lineAt: (k: number) => number | null): NonNullable<BatchRecord['errors']> {
  const redact = upstreamKeysRedactor(core.cfg);
  const data = errorData(up);
  const text = (v: unknown) => (typeof v === 'string' ? redact(v).slice(0, 500) : null);
  const given = data
    ? data.filter((e): e is Record<string, unknown> => !!e && typeof e === 'object').map((e) => ({
        code: text(e.code) ?? 'upstream_batch_failed',
        message: text(e.message) ?? 'The upstream batch failed.',
        // The upstream's file has one line per line sent, in order: its line k is the k-th
        // sent (whose number in the client's file counts blank lines too).
        line: typeof e.line === 'number' && Number.isSafeInteger(e.line) ? lineAt(e.line) : null,
        param: text(e.param),
      }))
    : [];
  return given.length ? given.slice(0, 100) : [{ code: 'upstream_batch_failed', message: 'The upstream batch failed without saying why.', line: null, param: null }];
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
  const refused: [BatchInputLine, GatewayError][] = [];
  for (const l of lines) {
    lineOf.set(l.customId, l.line);
    try {
      plans.set(l.customId, await op.plan(core, lineContext(key, run.batch.endpoint, `${run.batch.id}:${l.line}`, l.body), l.body));
    } catch (err) {
      if (!isGatewayError(err) || err.status >= 500) throw err;
      refused.push([l, err]);
    }
  }
  // A line that no longer plans (its model left the catalog, or the key may no longer use it,
  // since the batch was created) fails as the same call made now would, on its own: the
  // batch's other lines still run and are billed. It is not sent; an answer the upstream gives
  // it anyway (sent before the change) is not handed over, as nothing can bill it. Its hold is
  // released at once, which also closes its charge id: an earlier owner still reading the
  // upstream's answer with the old catalog charges nothing for a line the client sees refused.
  // A batch that is stopping records nothing more (its unrun lines end as it ends).
  if (refused.length && !(await run.stopping())) {
    for (const [l, err] of refused) {
      if (await core.stores.batches.addLine(run.batch.accountId, run.batch.id, answeredLine(newLineId(), l.customId, l.line, err.status, err.toJSON()))) await releaseBatchLines(core.meter, run.batch, [l.customId]);
    }
  }
  const sendable = lines.filter((l) => plans.has(l.customId));
  if (sendable.length === 0) {
    // Nothing left to read back: an upstream batch already running is cancelled, not left to run for nobody.
    const b = run.batch;
    const running = b.upstreamBatchId ?? (await submittedBefore(core, b));
    if (running) await cancelForGood(core, b, running);
    else if (running === undefined && !core.stopping.aborted) core.log.warn({ msg: 'an upstream batch this batch may have created could not be looked for; it is not cancelled', batch_id: b.id });
    return;
  }
  // An owner that died between creating the upstream batch and recording its id left a mark:
  // that batch is found by its tag, not created (and paid for upstream) a second time.
  const withBatch = await withUpstreamBatch(core, run, sendable, plans);
  if (!withBatch) return;
  const { b, sentHere } = withBatch;
  const upstreamId = b.upstreamBatchId!;
  // Sent again at every poll until the upstream takes it: a cancel it refused once (a 503)
  // would leave the batch running upstream to its end, every line of it billed.
  let cancelSent = false;
  while (!core.stopping.aborted) {
    if (!cancelSent && (await run.stopping()) && !core.stopping.aborted) cancelSent = await cancelUpstream(core, b, upstreamId);
    let up: Record<string, unknown>;
    try {
      up = JSON.parse(await send(core, b.upstream!, b.id, 'GET', `/batches/${encodeURIComponent(upstreamId)}`)) as Record<string, unknown>;
    } catch (err) {
      core.log.warn({ msg: 'polling an upstream batch failed', batch_id: b.id, err: err instanceof Error ? err.message : String(err) });
      await pause(core.cfg.limits.jobPollIntervalMs, core.stopping);
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
        await pause(core.cfg.limits.jobPollIntervalMs, core.stopping);
        continue;
      }
      if (status === 'failed' || status === 'expired') {
        const done = new Set((await core.stores.batches.lines(b.accountId, b.id)).map((l) => l.customId));
        const extra: BatchLine[] = status === 'expired' ? lines.filter((l) => !done.has(l.customId)).map((l) => notRunLine(l.customId, l.line, 'batch_expired', 'This request could not be executed before the completion window expired.')) : [];
        // A failed batch says why, in the upstream's words (with no key material in them).
        // The upstream's input is read back only for errors that name a line.
        const namesLines = errorData(up)?.some((e) => typeof (e as { line?: unknown } | null)?.line === 'number') === true;
        const lineAt = status !== 'failed' ? null : namesLines ? await sentLines(core, b, up, sentHere ? sendable : null, lineOf) : () => null;
        const finished = await finishBatch(core, b, status, extra, lineAt ? upstreamErrors(core, up, lineAt) : null);
        if (finished) run.seen(finished);
      } else if (status === 'cancelled' && !cancelSent) {
        // Cancelled upstream, not by the gateway: the batch is cancelled here too (what ran is
        // billed; the rest is released when the run ends), not reported complete.
        const finished = await finishBatch(core, b, 'cancelled');
        if (finished) run.seen(finished);
      }
      return;
    }
    await pause(core.cfg.limits.jobPollIntervalMs, core.stopping);
  }
}
