/**
 * A client that goes away mid-stream is billed for what was produced (counted with the
 * tokenizer, since the upstream sent no usage), the upstream connection is closed, and no
 * hold is left behind.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseUsd } from '../../src/billing/money.js';
import { chatCost, loadTokenizer, promptEstimate } from '../helpers/billing.js';
import { ACCOUNT, MODEL, eventually, postChat, sseData, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const CHUNKS = Array.from({ length: 60 }, (_, i) => ` word${i}`);
const MESSAGES = [{ role: 'user', content: 'Count slowly.' }];
const WALLET = parseUsd(100);

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeEach(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 100 });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterEach(async () => {
  await gw.close();
  await up.close();
});

/** Reads SSE events from a fetch body until `n` content deltas arrived; returns their text. */
async function readDeltas(res: Response, n: number): Promise<string[]> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  const deltas: string[] = [];
  while (deltas.length < n) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`stream ended after ${deltas.length} deltas`);
    buffer += decoder.decode(value, { stream: true });
    const cut = buffer.lastIndexOf('\n\n');
    if (cut === -1) continue;
    for (const data of sseData(buffer.slice(0, cut + 2))) {
      if (data === '[DONE]') throw new Error('stream finished before the client went away');
      const chunk = JSON.parse(data) as { choices: Array<{ delta: { content?: string } }> };
      const c = chunk.choices[0]?.delta.content;
      if (c) deltas.push(c);
    }
    buffer = buffer.slice(cut + 2);
  }
  reader.releaseLock();
  return deltas;
}

/** The account's charges: its ledger without the credits (the opening balance among them). */
async function charges() {
  return (await gw.gateway.admin.ledger(ACCOUNT)).filter((e) => e.units.kind !== 'credit');
}

async function noHoldLeft(): Promise<boolean> {
  const [holds, wallet] = await Promise.all([gw.stores.billing.openHolds(ACCOUNT), gw.stores.billing.wallet(ACCOUNT)]);
  return holds === 0 && wallet.held === 0n;
}

describe('client disconnects mid-stream', () => {
  it('bills the produced tokens, closes the upstream connection, leaves no hold', async () => {
    const tokenizer = await loadTokenizer();
    up.setBehavior({ kind: 'stream', chunks: CHUNKS, delayMs: 40, usage: false });
    const abort = new AbortController();
    const res = await postChat(
      gw.baseURL,
      devKey,
      { model: MODEL, messages: MESSAGES, stream: true, max_tokens: 500 },
      { signal: abort.signal },
    );
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const received = await readDeltas(res, 3);
    expect(received.length).toBeGreaterThanOrEqual(3);
    expect(received).toEqual(CHUNKS.slice(0, received.length));
    // While the stream runs, its worst case is held.
    expect(await gw.stores.billing.openHolds(ACCOUNT)).toBe(1);
    abort.abort();

    // The upstream sees its connection closed before it finished the answer.
    await up.waitForRequests(1);
    const rec = up.requests[0]!;
    await eventually(() => rec.isClosed, 'the upstream connection to close');
    expect(rec.closedEarly).toBe(true);
    expect(rec.completed).toBe(false);
    expect(rec.chunksSent).toBeLessThan(CHUNKS.length);

    // Billed once, for what the upstream had produced; the hold is gone.
    await eventually(async () => (await charges()).length === 1, 'a charge');
    await eventually(noHoldLeft, 'the hold to be settled');
    const ledger = await charges();
    expect(ledger).toHaveLength(1);
    const entry = ledger[0]!;
    expect(entry.units.kind).toBe('tokens');
    const units = entry.units as { kind: 'tokens'; prompt: number; completion: number };
    expect(units.completion).toBeGreaterThan(0);
    // The count is the tokenizer's count of a prefix of the answer that holds at least what
    // the client got and at most what the upstream sent.
    const candidates: number[] = [];
    for (let m = received.length; m <= rec.chunksSent; m++) candidates.push(tokenizer.count(CHUNKS.slice(0, m).join('')));
    expect(candidates).toContain(units.completion);
    expect(units.prompt).toBe(await promptEstimate(MESSAGES));
    expect(entry.cost).toBe(chatCost(units.prompt, units.completion));
    expect(entry.measured).toBe('tokenizer');
    expect(entry.model).toBe(MODEL);
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET - entry.cost);
  });

  // The provider read the whole prompt once it answered 200 (and may have cached it): the
  // prompt is billed, from its count when no usage came; no output was produced.
  it('a client gone before the first word pays the prompt, and nothing more', async () => {
    // The first content chunk would come 2 s after the role chunk; the client leaves at once.
    up.setBehavior({ kind: 'stream', chunks: CHUNKS, delayMs: 2_000, usage: false });
    const abort = new AbortController();
    const res = await postChat(
      gw.baseURL,
      devKey,
      { model: MODEL, messages: MESSAGES, stream: true, max_tokens: 500 },
      { signal: abort.signal },
    );
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toContain('"role":"assistant"');
    abort.abort();
    await up.waitForRequests(1);
    const rec = up.requests[0]!;
    await eventually(() => rec.isClosed, 'the upstream connection to close');
    expect(rec.closedEarly).toBe(true);
    expect(rec.chunksSent).toBe(0);
    await eventually(noHoldLeft, 'the hold to be settled');
    const ledger = await charges();
    expect(ledger).toHaveLength(1);
    const entry = ledger[0]!;
    expect(entry.units).toMatchObject({ kind: 'tokens', prompt: await promptEstimate(MESSAGES), completion: 0 });
    expect(entry.measured).toBe('tokenizer');
    expect(entry.cost).toBe(chatCost(await promptEstimate(MESSAGES), 0));
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET - entry.cost);
  });
});
