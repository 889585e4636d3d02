/**
 * The `moderation` guardrail: a text is judged by an upstream's OpenAI-shaped `/moderations`
 * (`{model, input: [texts]}` in, `{results: [{flagged}]}` out), and refused when any result is
 * flagged. Each check is its own charge at the guardrail's price (`units: {kind: "guardrail",
 * id, checks: 1}`), through the one billing door, under its own hold and entry id (the
 * request's own charge keeps the request id). A check that cannot answer (the upstream down,
 * erroring, answering garbage, or slower than `timeoutMs`) is billed nothing and refuses the
 * call with 503 guardrail_unavailable before any model call, unless the guardrail is
 * `failOpen`: a check that cannot answer never lets a text by unless told to. A check is an
 * upstream call like any other, through a circuit breaker (the checks' own on that upstream:
 * once open, a check fails at once instead of waiting out its timeout), timed and traced as a
 * child of the request.
 */
import { type BillingDoor, openAmountCall } from '../billing/billed-call.js';
import { cost, parsePrice } from '../billing/money.js';
import { releaseCall, settleGuardrailCheck } from '../billing/settle.js';
import { allowsModel } from '../catalog/allow-list.js';
import type { Model } from '../catalog/catalog.js';
import { GatewayError } from '../errors.js';
import type { GuardrailConfig } from '../options/guardrails.js';
import type { RequestContext } from '../pipeline/types.js';
import { type CallDeps, callUpstream } from '../upstream/call.js';
import type { UpstreamCall } from '../upstream/types.js';

type ModerationConfig = Extract<GuardrailConfig, { kind: 'moderation' }>;

/** What a moderation check needs of the gateway, once it is built. */
export interface ModerationDeps extends BillingDoor, CallDeps {}

export interface Moderation {
  readonly id: string;
  readonly on: readonly ('input' | 'output')[];
  covers(account: string, model: string): boolean;
  /**
   * Whether the upstream flags any of `texts` (checked and billed once; none: no check, not
   * flagged). Throws 503 guardrail_unavailable when it cannot answer, unless failOpen (then
   * false).
   */
  flags(deps: ModerationDeps, ctx: RequestContext, texts: readonly string[], on: 'input' | 'output'): Promise<boolean>;
  /**
   * Places the hold of one check now (402 when it does not fit), to check later: an output
   * check is held before the model's answer is paid for, so an answer paid for is never then
   * withheld for want of money for its check.
   */
  reserve(deps: ModerationDeps, ctx: RequestContext, on: 'input' | 'output'): Promise<ReservedCheck>;
}

/** A check whose hold is placed: made once (`check`), or given back unmade (`release`). */
export interface ReservedCheck {
  /** As `flags`, on the hold placed; no text: no check, the hold released. */
  check(texts: readonly string[]): Promise<boolean>;
  /** Releases the hold when no check was made on it (else nothing). */
  release(): Promise<void>;
}

export function createModeration(cfg: ModerationConfig): Moderation {
  const pricePico = parsePrice(cfg.priceUsd);
  const accounts = cfg.accounts ? new Set(cfg.accounts) : null;
  // What the ledger names the checks' "model": the guardrail, never a catalog model.
  const model = checkModel(cfg);
  const reserve: Moderation['reserve'] = async (deps, ctx, on) => {
    // Its own hold and entry: the request's own charge keeps the request id.
    const id = `${ctx.requestId}.guardrail.${cfg.id}.${on}`;
    const call = await openAmountCall(deps, ctx, { id, model, amount: cost(pricePico, 1), unobserved: true }, `a check of the guardrail "${cfg.id}"`);
    let used = false;
    return {
      async release() {
        if (used) return;
        used = true;
        await releaseCall(call);
      },
      async check(texts) {
        if (used) throw new Error(`the check of the guardrail "${cfg.id}" was made or released already`);
        used = true;
        const input = texts.filter((t) => t.length > 0);
        if (input.length === 0) {
          await releaseCall(call);
          return false;
        }
        let flagged: boolean;
        try {
          flagged = await ask(deps, cfg, ctx, input);
        } catch (err) {
          await releaseCall(call);
          deps.log.warn({ msg: 'moderation guardrail could not answer', guardrail: cfg.id, request_id: ctx.requestId, fail_open: cfg.failOpen, err: (err as Error).message });
          if (cfg.failOpen) return false;
          // An open circuit knows when a check may answer again: the client is told, as for a model.
          const retryAfter = err instanceof GatewayError ? err.headers['retry-after'] : undefined;
          throw new GatewayError('guardrail_unavailable', `The guardrail "${cfg.id}" could not check the ${on === 'input' ? 'request; it was not sent' : 'answer; it was withheld'}.`, {
            metadata: { guardrail: cfg.id },
            cause: err,
            ...(retryAfter ? { headers: { 'retry-after': retryAfter } } : {}),
          });
        }
        await settleGuardrailCheck(call, cfg.id, pricePico, cfg.upstream);
        return flagged;
      },
    };
  };
  return {
    id: cfg.id,
    on: cfg.on,
    covers: (account, modelId) => (!accounts || accounts.has(account)) && allowsModel(cfg.models, modelId),
    async flags(deps, ctx, texts, on) {
      if (!texts.some((t) => t.length > 0)) return false;
      return (await reserve(deps, ctx, on)).check(texts);
    },
    reserve,
  };
}

/** One call of the upstream's /moderations within the timeout: whether any result is flagged. Throws when it cannot tell. */
async function ask(deps: ModerationDeps, cfg: ModerationConfig, ctx: RequestContext, input: string[]): Promise<boolean> {
  // The checks keep a circuit of their own: the upstream's models answer on other routes, so
  // neither's failures (nor successes) decide the other's.
  const circuit = `moderations@${cfg.upstream}`;
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // A check that outlived its timeout failed, as a model call the upstream never answered
      // does (an aborted call is otherwise a client that left, which counts nothing).
      deps.breaker.failure(circuit, ctx.key.accountId);
      abort.abort();
      reject(new Error(`no answer within ${cfg.timeoutMs} ms`));
    }, cfg.timeoutMs);
  });
  try {
    const answer = (async () => {
      const call: UpstreamCall = {
        method: 'POST',
        path: '/moderations',
        headers: { 'content-type': 'application/json', accept: 'application/json', 'x-request-id': ctx.requestId },
        body: JSON.stringify({ model: cfg.model, input }),
        signal: abort.signal,
      };
      const res = await callUpstream(deps, cfg.upstream, call, ctx.observed.record, ctx.key.accountId, circuit);
      const text = await res.text();
      if (res.status < 200 || res.status >= 300) throw new Error(`the upstream answered ${res.status}`);
      const body = JSON.parse(text) as { results?: unknown };
      if (!Array.isArray(body.results) || body.results.length === 0) throw new Error('the answer has no results');
      return body.results.some((r) => typeof r === 'object' && r !== null && (r as { flagged?: unknown }).flagged === true);
    })();
    return await Promise.race([answer, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function checkModel(cfg: ModerationConfig): Model {
  return {
    id: `guardrail/${cfg.id}`,
    type: 'text',
    name: `Guardrail ${cfg.id}`,
    ownedBy: 'gateway',
    upstream: cfg.upstream,
    upstreamModel: cfg.model,
    targets: [],
    posture: 'GA',
    retiresAtMs: null,
    retiresAt: null,
    contextLength: 0,
    maxOutputTokens: 0,
    maxTokensPerImage: 0,
    maxTokensPerAudio: 0,
    embedding: false,
    text: null,
    media: null,
    parameters: {},
    row: {},
    deprecationHeaders: null,
  };
}
