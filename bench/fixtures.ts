/**
 * What the benchmark's upstream answers, built once and shared with the driver (which checks
 * every response body against it, so a wrong answer counts as an error, not as speed).
 */
export const MODEL = 'bench/chat';
export const HELD_MODEL = 'bench/held';
/**
 * The real shape's model: an alias the gateway lists, served by the upstream under another
 * name, which answers with a dated name of its own (as OpenAI answers `gpt-4o-mini` with
 * `gpt-4o-mini-2024-07-18`), so the gateway rewrites the name in every answer and event.
 */
export const ALIAS_MODEL = 'bench/mini';
export const ALIAS_UPSTREAM_MODEL = 'gpt-4o-mini';
export const ALIAS_SERVED_AS = 'gpt-4o-mini-2024-07-18';

const CREATED = 1_700_000_000;
const WORDS = 'The quick brown fox jumps over the lazy dog while the gateway meters every token it relays'.split(' ');
const USAGE = { prompt_tokens: 14, completion_tokens: 20, total_tokens: 34 };

/** What an upstream answers for one model name: the buffers it writes. */
export interface Answers {
  /** The non-streamed answer: one choice and usage (about 330 bytes). */
  plain: Buffer;
  /** 20 content chunks (the first also carries the role, the last the finish reason). */
  events: Buffer[];
  /** The usage-only chunk (`choices: []`) that `stream_options.include_usage` asks for. */
  usage: Buffer;
}

const chunk = (model: string, delta: Record<string, unknown>, finish: string | null): string =>
  JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion.chunk',
    created: CREATED,
    model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  });
const event = (data: string): Buffer => Buffer.from(`data: ${data}\n\n`);

/** The answers with `model` named in every one (a provider names the model it served). */
export function answersNaming(model: string): Answers {
  const plain = Buffer.from(
    JSON.stringify({
      id: 'chatcmpl-bench',
      object: 'chat.completion',
      created: CREATED,
      model,
      choices: [
        { index: 0, message: { role: 'assistant', content: WORDS.slice(0, 17).join(' ') }, logprobs: null, finish_reason: 'stop' },
      ],
      usage: USAGE,
    }),
  );
  const events: Buffer[] = [];
  for (let i = 0; i < 20; i++) {
    const word = `${i === 0 ? '' : ' '}${WORDS[i % WORDS.length]}`;
    events.push(event(chunk(model, i === 0 ? { role: 'assistant', content: word } : { content: word }, i === 19 ? 'stop' : null)));
  }
  const usage = event(JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model, choices: [], usage: USAGE }));
  return { plain, events, usage };
}

/** The kind shape's answers: the upstream names the very model the gateway lists. */
const KIND_ANSWERS = answersNaming(MODEL);
export const PLAIN = KIND_ANSWERS.plain;
export const STREAM_EVENTS = KIND_ANSWERS.events;
export const USAGE_EVENT = KIND_ANSWERS.usage;
export const DONE = Buffer.from('data: [DONE]\n\n');

/** Held streams: a first chunk at once, a tick chunk now and then, the end on release. */
export const HELD_FIRST = event(chunk(MODEL, { role: 'assistant', content: 'held' }, null));
export const TICK_EVENT = event(chunk(MODEL, { content: ' tick' }, null));
export const HELD_LAST = Buffer.concat([event(chunk(MODEL, {}, 'stop')), USAGE_EVENT, DONE]);

/** Exact bodies a client must receive through either relay. */
export const PLAIN_BODY = PLAIN.toString();
export const STREAM_BODY = Buffer.concat([...STREAM_EVENTS, USAGE_EVENT, DONE]).toString();

/**
 * The user message: autocannon replaces `[<id>]` with a fresh id on every call (idReplacement),
 * so no two calls send the same prompt, as in real traffic: a cache keyed on message text hits
 * only the system prompt, which does repeat. BENCH_PROMPT_BYTES pads it to a realistic size.
 */
const PAD = 'The gateway meters every token it relays, holds the worst case first and settles what was used. ';
const padBytes = Number(process.env.BENCH_PROMPT_BYTES ?? 0);
const USER = `[<id>] Say something short about foxes.${padBytes > 0 ? ` ${PAD.repeat(Math.ceil(padBytes / PAD.length)).slice(0, padBytes)}` : ''}`;
export const MESSAGES = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: USER },
];

/** What the load generator sends. Streamed calls ask for usage, as metered clients do. */
export const PLAIN_REQUEST = JSON.stringify({ model: MODEL, messages: MESSAGES, max_tokens: 64 });
export const STREAM_REQUEST = JSON.stringify({
  model: MODEL,
  messages: MESSAGES,
  max_tokens: 64,
  stream: true,
  stream_options: { include_usage: true },
});
/** A streamed call whose user message starts with `mark`: the upstream paces its answer by it. */
export const markedUser = (mark: string) => `${mark} ${USER}`;
const markedRequest = (mark: string) =>
  JSON.stringify({
    model: MODEL,
    messages: [MESSAGES[0], { role: 'user', content: markedUser(mark) }],
    max_tokens: 64,
    stream: true,
    stream_options: { include_usage: true },
  });
/**
 * The paced streamed call: the same answer, but the upstream writes it one event per write,
 * PACE_MS apart, as a model streaming tokens does (each event arrives in a read of its own).
 */
export const PACED_MARK = '[paced]';
export const PACED_REQUEST = markedRequest(PACED_MARK);
/**
 * The paired streamed call: the same 22 events, two per write, each pair when its second event
 * is due in a paced answer. It ends when a paced call does, so a relay serves both at about the
 * same rate and its store batches alike: what a paced call costs over a paired one is what the
 * 11 extra reads cost (the per-event figure).
 */
export const PAIRED_MARK = '[paired]';
export const PAIRED_REQUEST = markedRequest(PAIRED_MARK);
/** Milliseconds between two events of a paced answer. */
export const PACE_MS = 2;
/** Events of a streamed answer: 20 chunks, the usage chunk, [DONE]. */
export const STREAM_EVENT_COUNT = 22;
export const HELD_REQUEST = JSON.stringify({
  model: HELD_MODEL,
  messages: [{ role: 'user', content: 'Take your time.' }],
  max_tokens: 64,
  stream: true,
  stream_options: { include_usage: true },
});

/**
 * The config of a benchmarked gateway: the fast upstream for load and the slow one for held
 * streams, one account with a wallet that never runs out, one developer key, and limits so
 * high they never trip. `journalDir`: the settle journal, as the CLI keeps one for every
 * storage but memory. `observe`: the access log and /metrics, as a production gateway runs.
 */
export function gatewayConfig(o: { upstreamUrl: string; key: string; storage: Record<string, unknown>; journalDir: string | null; observe: boolean }) {
  const pricing = { prompt: '0.00000015', completion: '0.0000006' };
  return {
    serviceName: 'model-gateway-bench',
    upstreams: {
      fast: { baseUrl: `${o.upstreamUrl}/v1`, connections: 256 },
      slow: { baseUrl: `${o.upstreamUrl}/slow/v1`, connections: 4096, timeoutMs: 300_000 },
    },
    models: [
      { id: MODEL, type: 'text', upstream: 'fast', pricing },
      { id: ALIAS_MODEL, type: 'text', upstream: 'fast', upstreamModel: ALIAS_UPSTREAM_MODEL, pricing },
      { id: HELD_MODEL, type: 'text', upstream: 'slow', pricing },
    ],
    accounts: [{ id: 'bench', walletUsd: '1000000' }],
    keys: [{ key: o.key, account: 'bench', kind: 'developer', label: 'bench' }],
    limits: { keyRequestsPerMinute: 100_000_000, ipRequestsPerMinute: 100_000_000 },
    storage: o.storage,
    settleJournalDir: o.journalDir,
    accessLog: o.observe,
    metrics: o.observe ? { path: '/metrics' } : null,
  };
}
