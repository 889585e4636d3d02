/**
 * A streamed answer that is whole in the upstream's first read goes out as one body with a
 * Content-Length; one that is not streams as before. Both carry the same events, are billed
 * once from the upstream's usage, and a failure found in the first read is still an error
 * event after the 200.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatCost, chargesOf } from '../helpers/billing.js';
import { eventually, MODEL, postChat, type RunningGateway, sseData, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const chunk = (delta: Record<string, unknown>, finish: string | null) =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'provider-chat-1', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const usage = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'provider-chat-1', choices: [], usage: { prompt_tokens: 7, completion_tokens: 3 } })}\n\n`;
const WHOLE = chunk({ role: 'assistant', content: 'one' }, null) + chunk({ content: ' two' }, null) + chunk({}, 'stop') + usage + 'data: [DONE]\n\n';
const SSE_HEAD = { 'content-type': 'text/event-stream' };

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let account: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 1 });
  devKey = setup.devKey;
  account = setup.account;
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw.close();
  await up.close();
});

const custom = (handle: (res: ServerResponse) => void) => up.setBehavior({ kind: 'custom', handle: (_req, res) => handle(res) });
const contents = (text: string) =>
  sseData(text)
    .filter((d) => d !== '[DONE]')
    .map((d) => JSON.parse(d) as { model: string; choices: Array<{ delta: { content?: string } }> })
    .flatMap((c) => c.choices.map((ch) => ({ model: c.model, content: ch.delta.content ?? '' })));

async function ledgerCount(): Promise<number> {
  return (await chargesOf(gw.stores.billing.ledger(account))).length;
}

describe('streamed answers complete on arrival', () => {
  it('one upstream write: one body with Content-Length, the model renamed, usage hidden, billed once', async () => {
    custom((res) => {
      res.writeHead(200, SSE_HEAD);
      res.end(WHOLE);
    });
    const before = await ledgerCount();
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(res.headers.get('content-length')).toBe(String(Buffer.byteLength(text)));
    expect(contents(text)).toEqual([
      { model: MODEL, content: 'one' },
      { model: MODEL, content: ' two' },
      { model: MODEL, content: '' },
    ]);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(text).not.toContain('prompt_tokens');
    await eventually(async () => (await ledgerCount()) === before + 1, 'one ledger entry');
    const entry = (await chargesOf(gw.stores.billing.ledger(account))).at(-1)!;
    expect(entry.cost).toBe(chatCost(7, 3));
    expect(entry.measured).toBe('usage');
  });

  it('the rest after a pause: chunked as before, the same events, billed once', async () => {
    custom((res) => {
      res.writeHead(200, SSE_HEAD);
      res.write(chunk({ role: 'assistant', content: 'one' }, null));
      setTimeout(() => res.end(chunk({ content: ' two' }, null) + chunk({}, 'stop') + usage + 'data: [DONE]\n\n'), 60);
    });
    const before = await ledgerCount();
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-length')).toBeNull();
    const text = await res.text();
    expect(contents(text).map((c) => c.content)).toEqual(['one', ' two', '']);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    await eventually(async () => (await ledgerCount()) === before + 1, 'one ledger entry');
    expect((await chargesOf(gw.stores.billing.ledger(account))).at(-1)!.cost).toBe(chatCost(7, 3));
  });

  it('an error event in the first read: a 200 stream ending in the error event, nothing billed', async () => {
    custom((res) => {
      res.writeHead(200, SSE_HEAD);
      res.end(`data: ${JSON.stringify({ error: { message: 'overloaded' } })}\n\n`);
    });
    const before = await ledgerCount();
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    const events = sseData(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    const failure = JSON.parse(events.at(-2)!) as { error: { code: string; message: string }; choices: Array<{ finish_reason: string }> };
    expect(failure.error.code).toBe('upstream_error');
    expect(failure.error.message).toContain('overloaded');
    expect(failure.choices[0]!.finish_reason).toBe('error');
    // Let any settle land before counting: a release writes no ledger entry.
    await new Promise((r) => setTimeout(r, 100));
    expect(await ledgerCount()).toBe(before);
  });
});
