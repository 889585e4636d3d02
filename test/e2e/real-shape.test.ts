/**
 * The shape real traffic has, through the official `openai` SDK: the client asks for no
 * `stream_options` and names the gateway's model, the provider answers under its own dated name
 * and in its own formatting. The client sees the gateway's name in every chunk and in the plain
 * answer (nothing else of the answer changed: the name is replaced in the bytes, not
 * re-serialised), no usage chunk it did not ask for, and the ledger holds exactly usage x price.
 */
import type { ServerResponse } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf, chatCost } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, type RunningGateway, startGateway, testConfig, UPSTREAM_MODEL } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

/** The provider's own name for the model it served (every event and answer carries it). */
const DATED = 'test-upstream-2024-07-18';
/** Content that writes the dated name and a `"model":` field as text: the client must get it as is. */
const TRICKY = `I am "${DATED}", {"model":"${DATED}"}, café`;
const USAGE = { prompt_tokens: 30, completion_tokens: 9, total_tokens: 39 };

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

/**
 * JSON as Python's `json.dumps` writes it by default (a space after `,` and `:`, non-ASCII
 * escaped), as providers served from Python often stream it.
 */
const py = (v: unknown): string => {
  if (Array.isArray(v)) return `[${v.map(py).join(', ')}]`;
  if (v && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${py(x)}`).join(', ')}}`;
  return JSON.stringify(v).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
};

/** A provider's stream in one write: content chunks, a finish, the usage chunk, [DONE]. */
function writeStream(res: ServerResponse, pieces: string[]): string {
  const event = (body: object) => `data: ${py(body)}\n\n`;
  const chunk = (delta: object, finish: string | null) =>
    event({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1_700_000_000, model: DATED, system_fingerprint: 'fp_1', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
  let body = chunk({ role: 'assistant', content: '' }, null);
  for (const p of pieces) body += chunk({ content: p }, null);
  body += chunk({}, 'stop');
  body += event({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1_700_000_000, model: DATED, system_fingerprint: 'fp_1', choices: [], usage: USAGE });
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.end(`${body}data: [DONE]\n\n`);
  return body;
}

/** A provider's plain answer, pretty-printed as some providers send it. */
const plainAnswer = JSON.stringify(
  {
    id: 'chatcmpl-x',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: DATED,
    choices: [{ index: 0, message: { role: 'assistant', content: TRICKY }, logprobs: null, finish_reason: 'stop' }],
    usage: USAGE,
  },
  null,
  2,
);

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 100 });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const client = () => new OpenAI({ apiKey: devKey, baseURL: gw.baseURL, maxRetries: 0 });

async function lastCharge(n: number) {
  await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === n, `${n} ledger entries`);
  await eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0, 'no open hold');
  return (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).at(-1)!;
}

describe('the real shape through the openai SDK (alias, no stream_options)', () => {
  it('stream: the gateway name in every chunk, no usage chunk, billed exactly the upstream usage', async () => {
    up.setBehavior({ kind: 'custom', handle: (_req, res) => void writeStream(res, ['Hello', ' world. ', TRICKY]) });
    const before = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    const stream = await client().chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], stream: true });
    const models: string[] = [];
    let text = '';
    let usageChunks = 0;
    for await (const chunk of stream) {
      models.push(chunk.model);
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage || chunk.choices.length === 0) usageChunks++;
    }
    expect(models).toHaveLength(5);
    expect(new Set(models)).toEqual(new Set([MODEL]));
    expect(text).toBe(`Hello world. ${TRICKY}`);
    expect(usageChunks).toBe(0);
    // The gateway asked for the usage it meters by (the client did not), ahead of the client's
    // own bytes, which went as they came but for the model's upstream name.
    const raw = up.requests.at(-1)!.raw;
    expect(raw).toMatch(/^\{"max_completion_tokens":\d+,"stream_options":\{"include_usage":true\},"model":"provider-chat-1","messages":\[/);
    expect(up.requests.at(-1)!.body).toMatchObject({ model: UPSTREAM_MODEL, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Hi' }] });

    const entry = await lastCharge(before + 1);
    expect(entry.units).toEqual({ kind: 'tokens', prompt: 30, completion: 9 });
    expect(entry.cost).toBe(chatCost(30, 9));
    expect(entry.cost).toBe(48_000n); // 30 x 1,000 + 9 x 2,000 nano-USD
  });

  it('stream, raw: every event is the provider’s bytes with only the name replaced', async () => {
    let sent = '';
    up.setBehavior({
      kind: 'custom',
      handle: (_req, res) => {
        sent = writeStream(res, [TRICKY]);
      },
    });
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], stream: true }),
    });
    const body = await res.text();
    // The provider's events but the usage chunk, each with the name's bytes replaced, then [DONE].
    const expected = sent
      .split('\n\n')
      .filter((e) => e && !e.includes('"usage"'))
      .map((e) => `${e.replace(`"model": "${DATED}"`, `"model": ${JSON.stringify(MODEL)}`)}\n\n`);
    expect(expected).toHaveLength(3);
    expect(body).toBe(`${expected.join('')}data: [DONE]\n\n`);
  });

  it('a client body that writes the model with escapes still reaches the upstream under its name', async () => {
    up.setBehavior({ kind: 'json', usage: { prompt_tokens: 3, completion_tokens: 1 }, model: DATED });
    const escaped = JSON.stringify(MODEL).replace('/', '\\/').replace('t', '\\u0074');
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: `{"mod\\u0065l":${escaped},"messages":[{"role":"user","content":"say \\"model\\":\\"x\\""}]}`,
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { model: string }).model).toBe(MODEL);
    const raw = up.requests.at(-1)!.raw;
    expect(raw).toContain(`"mod\\u0065l":"${UPSTREAM_MODEL}","messages"`);
    expect(up.requests.at(-1)!.body).toMatchObject({ model: UPSTREAM_MODEL, messages: [{ role: 'user', content: 'say "model":"x"' }] });
  });

  it('plain: the gateway name, the rest of the answer as it came, billed exactly the upstream usage', async () => {
    up.setBehavior({
      kind: 'custom',
      handle: (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(plainAnswer);
      },
    });
    const before = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    const data = await client().chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] });
    expect(data.model).toBe(MODEL);
    expect(data.choices[0]!.message.content).toBe(TRICKY);
    expect(data.usage).toEqual(USAGE);
    // The same call's raw answer: renamed in place, the provider's formatting kept, only the name's bytes differ.
    const raw = await client().chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] }).asResponse();
    expect(await raw.text()).toBe(plainAnswer.replace(`"model": "${DATED}"`, `"model": ${JSON.stringify(MODEL)}`));

    const entry = await lastCharge(before + 2);
    expect(entry.units).toEqual({ kind: 'tokens', prompt: 30, completion: 9 });
    expect(entry.cost).toBe(48_000n);
  });
});
