/**
 * The generic token-priced call every text endpoint is declared over: read the body, let the
 * endpoint plan it, open the billed call (hold), call the model (retries, fallbacks, the
 * plugins' say on the body), then relay: a stream through the one stream relay, a plain
 * answer only after its charge is in the store.
 */
import { openTokenCall, refuseIfClosed, tokenHoldCost, type BilledCall, type TokenHold } from '../billing/billed-call.js';
import { estimatePromptTokens, type PromptInput, promptTokensBound } from '../billing/tokens.js';
import { type AnswerAccount, finalUsage, plainAccount, withTools } from '../billing/answer.js';
import { noOutput } from '../billing/output.js';
import { releaseCall, settleAnswer } from '../billing/settle.js';
import type { Model } from '../catalog/catalog.js';
import { errors, GatewayError } from '../errors.js';
import type { OutputGuard } from '../guardrails/index.js';
import { guardPlan } from '../guardrails/plan.js';
import { jsonText, parseJsonObject } from '../http/json.js';
import { ClientSignal } from '../http/node-lane.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import type { UpstreamResponse } from '../upstream/client.js';
import { upstreamError, upstreamKeyOf } from '../upstream/answer-errors.js';
import { redactedDeep, upstreamKeysRedactor } from '../upstream/key-redactor.js';
import { callModel, sameTarget, upstreamHeaders } from '../upstream/call.js';
import { pluginFields } from '../upstream/plugin-body.js';
import { refuseUnheldChanges } from './hosted-tools.js';
import { kindOf, type Translation, translatedResponse, upstreamKindOf } from '../upstream/kinds/index.js';
import { relayStream, type StreamCall } from '../upstream/stream/relay.js';
import { modelToken, TopFields, withModel } from '../upstream/stream/top-fields.js';
import type { CacheEntry } from '../cache/format.js';
import { storeStream, tapReader } from '../cache/tap.js';
import { cacheTicket, serveHit } from './cached.js';
import type { Operation, OutputCap, TextOperation, TextPlan } from './types.js';

/** The worst case of a chat-shaped prompt: its byte bound, its estimate counted once when asked, and the most output. */
export function promptHold(core: Services, input: PromptInput, maxOutput: number): TokenHold {
  let estimate: number | undefined;
  return { bound: promptTokensBound(input), estimate: () => (estimate ??= estimatePromptTokens(core.tokenizer, input)), maxOutput };
}

/**
 * The worst case of a body of any shape: its whole JSON read as prompt (an upper bound of the
 * text in it), for endpoints whose prompt fields a plugin may have reshaped.
 */
export function bodyHold(core: Services, fields: Record<string, unknown>, maxOutput: number, outputs = 1): TokenHold {
  const text = JSON.stringify(fields);
  let estimate: number | undefined;
  return { bound: Buffer.byteLength(text, 'utf8'), estimate: () => (estimate ??= core.tokenizer.count(text)), maxOutput, outputs };
}

/** A token-priced endpoint's operation, with its plan (a batch's lines are read by it when the batch is created). */
export interface PlannedOperation extends Operation {
  plan: TextOperation['plan'];
}

export function textOperation(decl: TextOperation): PlannedOperation {
  return {
    method: 'POST',
    path: decl.path,
    idempotent: true,
    plan: decl.plan,
    async run(core, ctx) {
      const bytes = await ctx.body();
      const fields = parseJsonObject(bytes);
      let plan = await decl.plan(core, ctx, fields);
      // A cap field sent as null is a key already: the cap then goes in by re-encoding (one key, never two).
      if (plan.cap && !plan.cap.sent && plan.unchanged && plan.cap.names.some((n) => Object.hasOwn(fields, n))) plan = { ...plan, unchanged: false };
      // The plugins see the body first: the hold is computed on what the upstream receives.
      const seen = core.hooks.has('onUpstreamRequest') ? plan.fields(plan.model) : null;
      let replaced = seen ? await pluginFields(core, ctx, plan.model, decl.path, seen) : null;
      if (seen && replaced) refuseUnheldChanges(decl.path, seen, replaced, plan.stream);
      // The output guardrails covering the call (none: the answer goes as it came, untouched). A
      // stream they cannot guard is refused before the input guardrails run (and bill a check).
      const guard = core.guardrails.output(ctx, plan.model, decl.path);
      if (guard && plan.stream) guard.refuseStream();
      // Then the input guardrails (a block throws here, before the hold): what they redacted is what is held for and sent.
      ({ plan, replaced } = await guardPlan(core.guardrails, ctx, decl.path, plan, replaced));
      if (replaced) {
        const hold = plan.holdFor(replaced);
        plan = { ...plan, hold, promptTokens: hold.estimate, ...plan.readsFor?.(replaced) };
      }
      // A stream's output guardrails are readied (a plugin's onOutput asked) before any model call.
      const guardStream = guard && plan.stream ? await guard.stream() : null;
      // The cache is looked up on what the model's own target would receive, before any hold.
      // An answer the output guardrails rewrite for the client is neither served from an entry
      // nor kept in one: a hit would skip their checks.
      const ready = plan;
      const ticket = await cacheTicket(core, ctx, plan, decl.path, decl.cache, () => capped(replaced ?? ready.fields(ready.model), ready.cap), guard !== null);
      if (ticket?.hit) return serveHit(core, ctx, plan, ticket, decl.cache!, fields);
      const call = await openTokenCall(core, ctx, plan.model, plan.hold);
      // A plain answer's paid checks are held with the call, before the model is asked: their
      // refusal (402) releases the call and nothing is asked or paid for.
      // (Only a guarded call waits on them: the unguarded path takes no extra turn.)
      const checked = guard && !plan.stream ? guard : null;
      if (checked) {
        try {
          await checked.prepare();
        } catch (err) {
          await releaseCall(call);
          throw err;
        }
      }
      let sent: Awaited<ReturnType<typeof send>>;
      try {
        sent = await send(core, ctx, plan, call, decl.path, bytes, replaced);
      } catch (err) {
        if (checked) await checked.release();
        throw err;
      }
      const { res, served, account } = sent;
      const headers = ticket ? { ...served.deprecationHeaders, 'x-cache': ticket.state } : (served.deprecationHeaders ?? {});
      if (plan.stream) {
        // The upstream has the request: the context's copy of the body goes (undici keeps the
        // bytes it sent until the answer ends; a body it got rewritten is then held nowhere).
        ctx.releaseBody();
        const events = plan.events(served, upstreamKeyOf(core.cfg, served.upstream));
        // Guarded on the client's side of the endpoint's reader: the bill reads the upstream's own events.
        let reader = guardStream ? guardStream(events) : events;
        const translated = account();
        const billing: StreamCall = { call, model: served, promptTokens: plan.promptTokens, ...(translated ? { account: translated } : {}) };
        if (ticket?.state === 'MISS' && decl.cache && sameTarget(served, plan.model)) {
          const collector = decl.cache.collect();
          const tapped = (reader = tapReader(reader, collector));
          billing.complete = () => storeStream(ticket, collector, translated ?? tapped.produced());
        }
        return relayStream(core, ctx, res, billing, reader, headers);
      }
      // The entry is keyed on what the model's own target receives: an answer a fallback
      // target gave (another model, maybe a lesser one) is not kept under it, or an outage
      // would pin the fallback's answers in the cache for its whole TTL.
      const keep = ticket?.state === 'MISS' && sameTarget(served, plan.model) ? ticket.store : null;
      if (!checked) return plainAnswer(core, ctx, plan, call, res, served, headers, account, keep, guard);
      try {
        return await plainAnswer(core, ctx, plan, call, res, served, headers, account, keep, guard);
      } finally {
        // The checks the answer never got (it failed, or its client left) go back.
        await checked.release();
      }
    },
  };
}

/**
 * Sends the plan's body through the model's targets; the client's bytes go as they came when
 * nothing changes them (but the held output cap, put ahead of them when they name none). A failure before any answer, or a non-2xx answer, releases the call
 * (nothing was produced). With the answer comes the model as served (its upstream).
 */
async function send(
  core: Services,
  ctx: RequestContext,
  plan: TextPlan,
  call: BilledCall,
  path: string,
  bytes: Uint8Array,
  /** The plugins' body for the model's own target, when they replaced it (they have seen it either way). */
  replaced: Record<string, unknown> | null,
) {
  const plugins = core.hooks.has('onUpstreamRequest');
  const own = (served: Model) => sameTarget(served, plan.model);
  const { upstream, detach } = upstreamSignal(ctx, call);
  try {
    const answer = await callModel(core, ctx, plan.model, async (served) => {
      const translation = translationFor(core, served, path);
      let body: string | Uint8Array | null = null;
      // The client's own bytes, with the gateway's fields put ahead of them and the model's
      // upstream name in place of the client's (null when the scan is unsure: then re-encoded).
      if (!translation && !plugins && plan.unchanged) body = clientBytes(bytes, plan, served.upstreamModel === plan.model.id ? null : served.upstreamModel);
      if (body === null) {
        let fields = replaced && own(served) ? replaced : plan.fields(served);
        // The plugins saw the model's own target's body already (before the hold): only a
        // fallback's body, for another upstream or model, is theirs to see again.
        if (plugins && !own(served)) {
          const theirs = await pluginFields(core, ctx, served, path, fields);
          if (theirs) {
            refuseUnheldChanges(path, fields, theirs, plan.stream);
            fields = theirs;
            heldEnough(plan, plan.holdFor(theirs), served, call);
          }
        }
        fields = capped(fields, plan.cap);
        if (!translation) body = JSON.stringify(fields);
        else {
          // Another kind of upstream: the request goes out in its API, to its path.
          const call = translation.request(fields, plan.stream);
          return { method: 'POST' as const, path: call.path, headers: upstreamHeaders(ctx.requestId), body: JSON.stringify(call.body), signal: upstream as unknown as AbortSignal };
        }
      }
      return { method: 'POST' as const, path, headers: upstreamHeaders(ctx.requestId), body, signal: upstream as unknown as AbortSignal };
    }, { whole: !plan.stream });
    const translation = translationFor(core, answer.served, path);
    // A translated answer is billed by what the upstream said in its own format.
    let account: () => AnswerAccount | null = () => null;
    if (translation) ({ res: answer.res, account } = translatedResponse(answer.res, translation, plan.stream, plan.fields(answer.served)));
    if (answer.res.status < 200 || answer.res.status >= 300) {
      throw await upstreamError(answer.res, answer.served.upstream, { log: core.log, requestId: ctx.requestId });
    }
    if (plan.stream) detach();
    return { ...answer, account };
  } catch (err) {
    void releaseCall(call);
    throw err;
  }
}

/**
 * Refuses a fallback target whose body, as its plugins changed it, asks for more than the call
 * holds (more output, or a larger bill at its least): the upstream is never asked for more
 * than was held. Another target may still take the call.
 */
function heldEnough(plan: TextPlan, need: TokenHold, served: Model, call: BilledCall): void {
  if (need.maxOutput <= plan.hold.maxOutput && tokenHoldCost(served, need, need.estimate()) <= call.held) return;
  throw new GatewayError('model_unavailable', `The request as plugins changed it for the upstream "${served.upstream}" asks for more than was held for it.`);
}

/** The fields with the held output cap added when they name none (the client sent none, or a plugin dropped it). */
export function capped(fields: Record<string, unknown>, cap: OutputCap | undefined): Record<string, unknown> {
  if (!cap || cap.names.some((n) => fields[n] !== undefined && fields[n] !== null)) return fields;
  return { ...fields, [cap.field]: cap.tokens };
}

const upstreamFields = new TopFields();

/**
 * The client's JSON object as the upstream gets it, without parsing or re-encoding it: the
 * held cap (when it names none) and the plan's `leading` members as its first fields (the plan
 * found none of them in it, so they are new), and its top-level `model` value replaced by
 * `rename` when given; null when a scan of it is unsure.
 */
function clientBytes(bytes: Uint8Array, plan: TextPlan, rename: string | null): Uint8Array | null {
  let lead = plan.leading ?? '';
  if (plan.cap && !plan.cap.sent) lead = `"${plan.cap.field}":${plan.cap.tokens},${lead}`;
  if (!lead && rename === null) return bytes;
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const open = buf.indexOf(123); // '{': the body parsed as an object, so it starts there after whitespace.
  const parts: Uint8Array[] = [buf.subarray(0, open + 1)];
  if (lead) parts.push(Buffer.from(lead));
  if (rename === null) parts.push(buf.subarray(open + 1));
  else {
    const f = upstreamFields;
    if (!f.scan(buf, 0, buf.length, true) || f.modelFrom === -1 || buf[f.modelFrom] !== 34) return null;
    parts.push(buf.subarray(open + 1, f.modelFrom), modelToken(rename).bytes, buf.subarray(f.modelTo));
  }
  return Buffer.concat(parts);
}

/**
 * The upstream call's abort signal. A client that goes away aborts it, until a stream's relay
 * takes over (`detach`): a client gone after the answer's end leaves the upstream to be read on
 * for its usage. Shutdown's grace ending before the answer came aborts it too (a stream's relay
 * takes that over once it starts). A light signal (undici takes any EventTarget-like one; a
 * user's own client is handed a native one): a native AbortController costs several
 * microseconds per call. Made apart from `send`, so that the listeners left on the client's
 * signal and the billed call hold only the signal, never the request body `send` has in scope.
 */
function upstreamSignal(ctx: RequestContext, call: BilledCall): { upstream: ClientSignal; detach(): void } {
  const upstream = new ClientSignal();
  const signal = ctx.request.signal;
  const gone = () => upstream.abort(signal?.reason);
  if (signal?.aborted) gone();
  else signal?.addEventListener('abort', gone, { once: true });
  call.onAbort(() => upstream.abort(errors.shuttingDown()));
  return { upstream, detach: () => signal?.removeEventListener('abort', gone) };
}

/** How the upstream serving `served` carries the ingress API at `path`: null when it speaks it. */
function translationFor(core: Services, served: Model, path: string): Translation | null {
  return kindOf(upstreamKindOf(core.cfg.upstreams, served.upstream)).translation(path);
}

/**
 * A plain answer: everything that can fail on a hostile answer (malformed JSON, a shape that
 * is not the endpoint's, nesting too deep to re-serialise) happens before billing, so the
 * client is charged only for an answer it gets; and the answer goes out only once its charge
 * is in the store (or the settle journal).
 */
async function plainAnswer(
  core: Services,
  ctx: RequestContext,
  plan: TextPlan,
  call: BilledCall,
  res: UpstreamResponse,
  served: Model,
  headers: Record<string, string>,
  /** The upstream's answer read in its own format, when it was translated. */
  translated: () => AnswerAccount | null,
  /** Keeps the whole answer in the response cache (a miss); null: not cached. */
  keep: ((entry: CacheEntry) => Promise<void>) | null,
  /** The output guardrails covering the call: they rewrite the client's copy; null: none. */
  guard: OutputGuard | null,
): Promise<Response> {
  let text: string;
  let read: ReturnType<TextPlan['answer']>;
  let answer: Record<string, unknown>;
  try {
    text = await res.text();
    const parsed = JSON.parse(text) as unknown;
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
    answer = parsed as Record<string, unknown>;
    read = plan.answer(answer);
    // The client sees the model it called, not the upstream's name for it: renamed in the
    // answer's text when a scan of it is sure, else re-serialised.
    if (served.upstreamModel !== served.id && answer.model !== served.id) {
      answer.model = served.id;
      text = withModel(text, served.id) ?? JSON.stringify(answer);
    }
  } catch (err) {
    if (ctx.request.signal?.aborted) {
      // The client left after the upstream's 200: the provider read the prompt, which is billed
      // (counted: its usage was in the answer nobody read).
      void settleAnswer(call, plainAccount(null, noOutput), { complete: false, cause: 'stopped', upstream: served.upstream, promptTokens: plan.promptTokens, tokenizer: core.tokenizer });
      throw err;
    }
    void releaseCall(call);
    if (err instanceof GatewayError) throw err;
    core.breaker.failure(served.upstream, ctx.key.accountId);
    throw errors.malformedAnswer(served.upstream);
  }
  refuseIfClosed(call);
  const native = translated();
  // A translated answer keeps its own reading of its usage (whether the report is final, what
  // it leaves out); the hosted tools are read from the translation.
  const account = native ? withTools(native, () => read.tools ?? null) : { ...plainAccount(read.usage, read.output, read.tools), failed: () => read.failed === true };
  await settleAnswer(call, account, { complete: true, upstream: served.upstream, promptTokens: plan.promptTokens, tokenizer: core.tokenizer });
  if (account.failed?.()) {
    // Relayed as the upstream sent it, a failed answer is recorded as one (an Idempotency-Key
    // keeps none), and its error, the upstream's words, carries no upstream key material.
    ctx.observed.record.errorCode ??= 'upstream_error';
    const error = redactedDeep(answer.error, upstreamKeysRedactor(core.cfg));
    if (error !== answer.error) {
      answer.error = error;
      text = JSON.stringify(answer);
    }
  }
  await read.remember?.();
  // Kept once paid for, before the client has it: the next identical request is a hit.
  const final = finalUsage(account);
  if (keep && final) await keep({ body: answer, usage: final, tools: account.tools?.() ?? null });
  // The output guardrails rewrite the client's copy only: what was billed is the answer as it came.
  const guarded = guard ? await guard.answer(text) : null;
  return jsonText(200, guarded ?? text, headers);
}
