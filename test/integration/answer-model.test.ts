/**
 * One answer model, one settle rule: the same upstream answer bills the same units whichever
 * API the client called it through (chat completions, Responses, Anthropic Messages), plain or
 * streamed, whatever the upstream's kind (OpenAI, Anthropic, Gemini) and however it reported
 * its usage (at the end, not at all, early, partly, as a string, negative), cut or whole. And
 * the upstream is never asked for more output than was held.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { costOf, parsePrice } from '../../src/billing/money.js';
import type { LedgerEntry } from '../../src/index.js';
import { loadTokenizer } from '../helpers/billing.js';
import { ACCOUNT, chargedCall, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';
import { type ScriptedAnswer, startWireUpstream, type UsagePlan, type WireKind, type WireUpstream } from '../helpers/wire-answers.js';

type Ingress = 'chat' | 'responses' | 'messages';
type TokenUnits = { kind: 'tokens'; prompt: number; completion: number };

const MAX_OUTPUT = 1000;
const modelOf = (kind: WireKind) => `wire/${kind}`;
/** The ingress APIs each kind serves by translation or natively (Responses over an OpenAI upstream is its own wire format, not this one). */
const INGRESSES: Record<WireKind, Ingress[]> = { openai: ['chat', 'messages'], anthropic: ['chat', 'responses', 'messages'], gemini: ['chat', 'responses', 'messages'] };

let wire: WireUpstream;
let gw: RunningGateway;
let devKey: string;
let count: (text: string) => number;

beforeAll(async () => {
  wire = await startWireUpstream();
  const tokenizer = await loadTokenizer();
  count = (t) => tokenizer.count(t);
  const setup = testConfig({ walletUsd: 1_000_000 });
  devKey = setup.devKey;
  const upstream = (kind: WireKind) => ({ kind, baseUrl: wire.url, apiKey: 'sk-wire-upstream-key-0123456789', timeoutMs: 10_000 });
  setup.options.upstreams = { openai: upstream('openai'), anthropic: upstream('anthropic'), gemini: upstream('gemini') };
  setup.options.models = (['openai', 'anthropic', 'gemini'] as const).map((kind) => ({
    id: modelOf(kind),
    type: 'text' as const,
    name: `Wire ${kind}`,
    ownedBy: 'Test Labs',
    upstream: kind,
    upstreamModel: `${kind}-model-2024-07-18`,
    pricing: { prompt: '0.000001', completion: '0.000002', ...(kind === 'openai' ? { serviceTiers: { priority: { prompt: '0.000003', completion: '0.000007' } } } : {}) },
    contextLength: 32_000,
    maxOutputTokens: MAX_OUTPUT,
  }));
  // A small context window, for the cap a long prompt leaves.
  setup.options.models.push({ ...setup.options.models[0]!, id: 'wire/small', contextLength: 2_000, maxOutputTokens: 1_000 });
  setup.options.keys = [{ key: devKey, account: ACCOUNT, kind: 'developer', label: 'dev' }];
  gw = await startGateway(setup.options);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await wire?.close();
});

const PROMPT = 'Write about the sea.';

function requestOf(ingress: Ingress, kind: WireKind | 'responses', stream: boolean): { path: string; body: Record<string, unknown> } {
  // Responses over an OpenAI upstream is its own wire format: the openai model, asked on /responses.
  const model = modelOf(kind === 'responses' ? 'openai' : kind);
  if (ingress === 'chat') return { path: '/chat/completions', body: { model, messages: [{ role: 'user', content: PROMPT }], stream } };
  if (ingress === 'responses') return { path: '/responses', body: { model, input: PROMPT, stream } };
  return { path: '/messages', body: { model, max_tokens: MAX_OUTPUT, messages: [{ role: 'user', content: PROMPT }], stream } };
}

/**
 * Makes one call and returns the charge it landed (or null when none): the whole answer read,
 * or (`leave`) the client gone right after the answer's first read.
 */
async function call(
  ingress: Ingress,
  kind: WireKind | 'responses',
  stream: boolean,
  opts: { extra?: Record<string, unknown>; leave?: boolean } = {},
): Promise<{ status: number; charge: LedgerEntry | null; text: string }> {
  const { path, body } = requestOf(ingress, kind, stream);
  return chargedCall(gw, devKey, path, { ...body, ...opts.extra }, { leave: opts.leave === true });
}

const unitsOf = (e: LedgerEntry | null) => (e ? ({ prompt: (e.units as TokenUnits).prompt, completion: (e.units as TokenUnits).completion }) : null);

/** ~2,000 tokens of text in 40 pieces. */
const LONG = Array.from({ length: 40 }, (_, i) => ` The sea rolls in wave number ${i}, grey and green under a low sky, again and again and again and again and again`);

describe('the same answer bills the same through every API (the cases found on the starting main)', () => {
  it('/v1/messages over an OpenAI upstream whose usage lacks completion_tokens, or sends it as a string, bills the count as chat does', async () => {
    for (const usage of ['partial', 'string'] as const) {
      const answer: ScriptedAnswer = { pieces: LONG, usage, prompt: 12, completion: 4000 };
      wire.script('openai', answer);
      const chat = await call('chat', 'openai', false);
      const messages = await call('messages', 'openai', false);
      expect(chat.status).toBe(200);
      expect(messages.status).toBe(200);
      const counted = count(LONG.join(''));
      expect(unitsOf(chat.charge)!.completion).toBe(counted);
      expect(unitsOf(messages.charge)!.completion).toBe(counted);
    }
  });

  it('a stream with an early usage chunk (5 output tokens, then ~2,000 tokens of text) bills the text through chat and Messages alike', async () => {
    wire.script('openai', { pieces: LONG, usage: 'early', prompt: 12, completion: 4000 });
    const counted = count(LONG.join(''));
    expect(counted).toBeGreaterThan(1000);
    const chat = await call('chat', 'openai', true);
    const messages = await call('messages', 'openai', true);
    expect(unitsOf(chat.charge)).toEqual({ prompt: 12, completion: counted });
    expect(unitsOf(messages.charge)).toEqual({ prompt: 12, completion: counted });
  });

  it('a stream whose finish chunk reports a partial usage and a later chunk the final one bills the final one through chat and Messages alike', async () => {
    wire.script('openai', { pieces: LONG, usage: 'finish-then-final', prompt: 12, completion: 3000 });
    const chat = await call('chat', 'openai', true);
    const messages = await call('messages', 'openai', true);
    expect(unitsOf(chat.charge)).toEqual({ prompt: 12, completion: 3000 });
    expect(unitsOf(messages.charge)).toEqual({ prompt: 12, completion: 3000 });
    expect(messages.text).toContain('"output_tokens":3000');
  });

  it("an Anthropic stream whose message_delta carries no usage is billed its text, not message_start's opening output count (chat, Responses, Messages)", async () => {
    wire.script('anthropic', { pieces: LONG, usage: 'absent', prompt: 12, completion: 4000 });
    // 'absent' still sends message_start's usage (input, and output_tokens: 1): the opening report.
    const counted = count(LONG.join(''));
    for (const ingress of INGRESSES.anthropic) {
      const r = await call(ingress, 'anthropic', true);
      expect(r.status, ingress).toBe(200);
      expect(unitsOf(r.charge), ingress).toEqual({ prompt: 12, completion: counted });
    }
  });

  it('a Gemini stream whose only usageMetadata came in its first event is billed its text, not 1 token', async () => {
    wire.script('gemini', { pieces: LONG, usage: 'early', prompt: 12, completion: 4000 });
    const counted = count(LONG.join(''));
    for (const ingress of INGRESSES.gemini) {
      const r = await call(ingress, 'gemini', true);
      expect(unitsOf(r.charge), ingress).toEqual({ prompt: 12, completion: counted });
    }
  });

  it('a Gemini stream whose first event ends the answer, left by the client after it, bills the usage that event reported through chat, Responses and Messages alike', async () => {
    // The one event carries the text, the finish and the final usage (1 output token; the
    // text counts 2); the body ends only later. Each translation says the content ended in
    // its own way (Messages only with the usage it waits for): the upstream's event decides,
    // and the relay reads on for the end.
    wire.script('gemini', { pieces: ['aA'], usage: 'final', prompt: 9, completion: 1 }, undefined, 300);
    expect(count('aA')).toBe(2);
    for (const ingress of INGRESSES.gemini) {
      const r = await call(ingress, 'gemini', true, { leave: true });
      expect(unitsOf(r.charge), ingress).toEqual({ prompt: 9, completion: 1 });
    }
  });

  it('an OpenAI stream that ends cleanly after its finish and usage, with no [DONE], is whole through chat as through Messages: ended normally, its usage billed', async () => {
    const pieces = ['The sea', ' is grey', ' today.'];
    wire.script('openai', { pieces, usage: 'final', prompt: 12, completion: 40, noDone: true });
    expect(count(pieces.join(''))).not.toBe(40);
    const chat = await call('chat', 'openai', true);
    const messages = await call('messages', 'openai', true);
    expect(chat.status).toBe(200);
    expect(chat.text).not.toContain('"error"');
    expect(chat.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(chat.text).toContain('"finish_reason":"stop"');
    expect(messages.text).toContain('message_stop');
    expect(unitsOf(chat.charge)).toEqual({ prompt: 12, completion: 40 });
    expect(unitsOf(messages.charge)).toEqual({ prompt: 12, completion: 40 });
    // Without its finish, the same clean end is a cut answer: an error event, the text counted.
    wire.script('openai', { pieces, usage: 'final', prompt: 12, completion: 40, noDone: true, noFinish: true });
    const unfinished = await call('chat', 'openai', true);
    expect(unfinished.text).toContain('"finish_reason":"error"');
    expect(unitsOf(unfinished.charge)).toEqual({ prompt: 12, completion: 40 });
  });

  it('the upstream is asked for at most the output held, on every kind, when the client sends no cap', async () => {
    const caps: Array<[string, unknown]> = [];
    for (const kind of ['openai', 'anthropic', 'gemini'] as const) {
      wire.script(kind, { pieces: ['Hi'], usage: 'final', prompt: 12, completion: 1 });
      for (const ingress of INGRESSES[kind]) {
        for (const stream of [false, true]) {
          const before = wire.requests.length;
          const r = await call(ingress, kind, stream);
          expect(r.status, `${kind} ${ingress}`).toBe(200);
          const sent = wire.requests[before]!.body;
          const cap =
            kind === 'anthropic'
              ? sent.max_tokens
              : kind === 'gemini'
                ? (sent.generationConfig as { maxOutputTokens?: unknown } | undefined)?.maxOutputTokens
                : (sent.max_completion_tokens ?? sent.max_tokens);
          caps.push([`${kind} ${ingress} ${stream ? 'stream' : 'plain'}`, cap]);
        }
      }
    }
    for (const [what, cap] of caps) expect(cap, what).toBe(MAX_OUTPUT);
  });

  it('a fallback to an upstream of another kind serving the same model name gets a request in its own API', async () => {
    const failing = await startTestUpstream();
    failing.setBehavior({ kind: 'error', status: 500 });
    const setup = testConfig({ walletUsd: 100 });
    setup.options.upstreams = {
      first: { baseUrl: failing.url, apiKey: 'sk-first-upstream-0123456789', timeoutMs: 10_000 },
      second: { kind: 'anthropic', baseUrl: wire.url, apiKey: 'sk-second-upstream-0123456789', timeoutMs: 10_000 },
    };
    setup.options.models = [
      {
        id: 'wire/fallback',
        type: 'text',
        name: 'Fallback',
        ownedBy: 'Test Labs',
        targets: [
          { upstream: 'first', upstreamModel: 'same-name', priority: 0 },
          { upstream: 'second', upstreamModel: 'same-name', priority: 1 },
        ],
        pricing: { prompt: '0.000001', completion: '0.000002' },
        contextLength: 32_000,
        maxOutputTokens: MAX_OUTPUT,
      },
    ];
    setup.options.keys = [{ key: setup.devKey, account: ACCOUNT, kind: 'developer', label: 'dev' }];
    const other = await startGateway(setup.options);
    try {
      wire.script('anthropic', { pieces: ['Hi'], usage: 'final', prompt: 12, completion: 1 });
      const before = wire.requests.length;
      const res = await fetch(`${other.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'wire/fallback', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
      expect(failing.requests.length).toBeGreaterThan(0);
      expect(wire.requests[before]!.path).toBe('/v1/messages');
      expect(wire.requests[before]!.body.max_tokens).toBe(MAX_OUTPUT);
    } finally {
      await other.close();
      await failing.close();
    }
  });

  it('a long prompt gets the cap the context window leaves (providers refuse a prompt plus cap over it)', async () => {
    wire.script('openai', { pieces: ['Hi'], usage: 'final', prompt: 12, completion: 1 });
    const content = 'word '.repeat(1_500);
    const before = wire.requests.length;
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'wire/small', messages: [{ role: 'user', content }] }),
    });
    expect(res.status).toBe(200);
    const cap = wire.requests[before]!.body.max_completion_tokens as number;
    expect(cap).toBeGreaterThan(0);
    expect(cap).toBeLessThan(1_000);
    expect(cap + count(content)).toBeLessThanOrEqual(2_000);
  });
});

describe('property: every ingress x upstream kind pair, plain and streamed, bills what the native path bills', () => {
  const plans: UsagePlan[] = ['final', 'absent', 'early', 'early-then-final', 'partial', 'string', 'negative'];
  const answer = fc.record({
    pieces: fc.array(fc.stringMatching(/^[ a-zA-Z.,!?]{1,30}$/), { minLength: 1, maxLength: 12 }),
    usage: fc.constantFrom(...plans),
    prompt: fc.integer({ min: 1, max: 500 }),
    completion: fc.integer({ min: 1, max: 3000 }),
  });
  const native: Record<WireKind, Ingress> = { openai: 'chat', anthropic: 'messages', gemini: 'chat' };

  it('the same units (and, for whole answers, the usage when final, else the produced text counted)', async () => {
    await fc.assert(
      fc.asyncProperty(answer, fc.constantFrom<WireKind>('openai', 'anthropic', 'gemini'), fc.boolean(), fc.option(fc.nat({ max: 4000 }), { nil: undefined }), async (a, kind, stream, cut) => {
        const cutAt = stream ? cut : undefined;
        wire.script(kind, a, cutAt);
        const reference = await call(native[kind], kind, stream);
        for (const ingress of INGRESSES[kind]) {
          if (ingress === native[kind]) continue;
          const r = await call(ingress, kind, stream);
          // The completion is the upstream's to say or the text's to count, whatever the API;
          // the prompt too whenever the upstream reported it.
          expect(unitsOf(r.charge)?.completion, `${ingress} over ${kind}`).toBe(unitsOf(reference.charge)?.completion);
          if (a.usage === 'final' || a.usage === 'early' || a.usage === 'early-then-final') expect(unitsOf(r.charge)?.prompt, `${ingress} over ${kind}`).toBe(unitsOf(reference.charge)?.prompt);
        }
        if (cutAt === undefined) {
          expect(reference.charge, 'a whole answer is billed').not.toBeNull();
          // A plain body's usage is final when its counts are valid; a stream's only when it came after the output.
          // An opening count is not final: Gemini's running total of 1, chat's 5; Anthropic's is read as 0.
          const early = stream ? (kind === 'gemini' ? 1 : kind === 'anthropic' ? 0 : 5) : 5;
          const final = a.usage === 'final' || a.usage === 'early-then-final';
          const expected = final ? a.completion : a.usage === 'early' && !stream ? 5 : Math.max(a.usage === 'early' ? early : 0, count(a.pieces.join('')));
          expect(unitsOf(reference.charge)!.completion).toBe(expected);
        }
      }),
      { numRuns: 40 },
    );
  }, 240_000);
});

describe('property: the money rules of round 4 hold on every ingress x upstream kind pair', () => {
  const plans: UsagePlan[] = ['final', 'absent', 'early', 'early-then-final', 'partial', 'string', 'negative'];
  const answer = fc.record({
    pieces: fc.array(fc.stringMatching(/^[ a-zA-Z.,!?]{1,30}$/), { minLength: 1, maxLength: 8 }),
    usage: fc.constantFrom(...plans),
    prompt: fc.integer({ min: 1, max: 500 }),
    completion: fc.integer({ min: 1, max: 3000 }),
  });
  const pair = fc.constantFrom(...(Object.entries(INGRESSES) as Array<[WireKind, Ingress[]]>).flatMap(([kind, ins]) => ins.map((i) => [kind, i] as const)));
  const tiers: Record<string, { prompt: bigint; completion: bigint }> = {
    list: { prompt: parsePrice('0.000001'), completion: parsePrice('0.000002') },
    priority: { prompt: parsePrice('0.000003'), completion: parsePrice('0.000007') },
  };

  it('a price-changing field is billed at the tier it names when the model prices it, else refused before any upstream call', async () => {
    await fc.assert(
      fc.asyncProperty(answer, pair, fc.boolean(), fc.constantFrom(undefined, 'default', 'priority', 'flex'), async (a, [kind, ingress], stream, tier) => {
        wire.script(kind, a);
        const before = wire.requests.length;
        const r = await call(ingress, kind, stream, tier === undefined ? {} : { extra: { service_tier: tier } });
        if (r.status !== 200) {
          // Refused (an unpriced tier, or an upstream kind that cannot carry it): nothing went upstream, nothing billed.
          expect(r.status, `${ingress} over ${kind}, ${tier}`).toBe(400);
          expect(wire.requests.length).toBe(before);
          expect(r.charge).toBeNull();
          return;
        }
        expect(tier, 'an unpriced tier is never served').not.toBe('flex');
        const prices = tier === 'priority' ? tiers.priority! : tiers.list!;
        const u = unitsOf(r.charge)!;
        expect(r.charge!.cost, `${ingress} over ${kind}, ${tier}`).toBe(costOf([[prices.prompt, u.prompt], [prices.completion, u.completion]]));
      }),
      { numRuns: 30 },
    );
  }, 240_000);

  it('a stream the client leaves before its first word pays its prompt, the same through every API', async () => {
    const native: Record<WireKind, Ingress> = { openai: 'chat', anthropic: 'messages', gemini: 'chat' };
    await fc.assert(
      fc.asyncProperty(answer, fc.constantFrom<WireKind>('openai', 'anthropic', 'gemini'), async (a, kind) => {
        // The first event goes out at once, the rest only after the client has gone.
        wire.script(kind, a, undefined, 2_000);
        const reference = await call(native[kind], kind, true, { leave: true });
        expect(reference.charge, `${kind}: the prompt is billed`).not.toBeNull();
        for (const ingress of INGRESSES[kind]) {
          if (ingress === native[kind]) continue;
          const r = await call(ingress, kind, true, { leave: true });
          expect(r.charge, `${ingress} over ${kind}: the prompt is billed`).not.toBeNull();
          expect(unitsOf(r.charge)!.completion, `${ingress} over ${kind}`).toBe(unitsOf(reference.charge)!.completion);
        }
      }),
      { numRuns: 12 },
    );
  }, 240_000);

  it('a Responses answer bills its text once, whether it streams it as deltas or only in its .done events', async () => {
    await fc.assert(
      fc.asyncProperty(answer, fc.constantFrom<'deltas' | 'done-only'>('deltas', 'done-only'), fc.boolean(), async (a, textIn, stream) => {
        wire.script('openai', { ...a, textIn });
        const r = await call('responses', 'responses', stream);
        expect(r.status).toBe(200);
        // Responses reports usage only in its last event: a valid report is final.
        const expected = a.usage === 'final' || a.usage === 'early-then-final' ? a.completion : a.usage === 'early' ? 5 : count(a.pieces.join(''));
        expect(unitsOf(r.charge)!.completion).toBe(expected);
      }),
      { numRuns: 30 },
    );
  }, 240_000);
});
