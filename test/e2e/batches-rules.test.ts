/**
 * The batch rules the other batch tests take for granted, each through the official SDK:
 * `limits.maxFileBytes` bounds the file itself (not its multipart envelope), and
 * `limits.maxFileBytesPerAccount` what an account keeps; a model without
 * batch prices bills its lines at its list price (what the same call costs directly); lines run
 * outside the key's per-minute limits; a batch the key's monthly cap cannot hold is 402; and
 * `/key` counts what the batch spent.
 */
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf } from '../helpers/billing.js';
import { createChatBatch } from '../helpers/batches.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const MAX_FILE = 4096;
/** What an account may keep: four files of the largest size. */
const ACCOUNT_FILES = 4 * MAX_FILE;
const FILES = 'acct_files';
const filesKey = testKey();
/** A second key of that account: each key has four requests a minute here. */
const filesKey2 = testKey();
const CAPPED = 'acct_capped_batch';
const cappedKey = testKey();
/** A key of the main account used by one test alone: its four requests a minute are counted there. */
const rateKey = testKey();

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({
    upstreamUrl: up.url,
    // Four requests a minute per key: a batch of five lines still runs them all.
    limits: { maxFileBytes: MAX_FILE, maxFileBytesPerAccount: ACCOUNT_FILES, keyRequestsPerMinute: 4 },
    accounts: [
      { id: CAPPED, walletUsd: 10 },
      { id: FILES, walletUsd: 0 },
    ],
    keys: [
      { key: filesKey, account: FILES, kind: 'developer' },
      { key: filesKey2, account: FILES, kind: 'developer' },
      { key: cappedKey, account: CAPPED, kind: 'developer', monthlyCapUsd: '0.000001' },
      { key: rateKey, account: ACCOUNT, kind: 'developer' },
    ],
  });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: gw.baseURL, maxRetries: 0 });

describe('batch rules', () => {
  it("an account keeps at most maxFileBytesPerAccount of files: an upload past it is 400 naming the file; a deleted one makes room", async () => {
    const openai = client(filesKey);
    const file = Buffer.alloc(MAX_FILE, 0x20);
    const kept: string[] = [];
    // Four requests a minute per key: this key's four uploads fill the room; the second key goes on.
    for (let i = 0; i < 4; i++) kept.push((await openai.files.create({ file: await toFile(file, `f${i}.jsonl`), purpose: 'batch' })).id);
    const more = client(filesKey2);
    const past = await more.files.create({ file: await toFile(Buffer.from(' '), 'one-more.jsonl'), purpose: 'batch' }).catch((e) => e);
    expect(past.status).toBe(400);
    expect(past.error.param).toBe('file');
    expect(past.error.message).toContain(String(ACCOUNT_FILES));
    // A deleted file's bytes are room again.
    await more.files.delete(kept[0]!);
    expect((await more.files.create({ file: await toFile(file, 'again.jsonl'), purpose: 'batch' })).bytes).toBe(MAX_FILE);
  });

  it('maxFileBytes bounds the file: one of exactly the limit is taken, one byte more is 413 naming the file', async () => {
    const openai = client(devKey);
    const line = JSON.stringify({ custom_id: 'a', method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, messages: [{ role: 'user', content: 'x' }] } });
    const exact = Buffer.from(line.padEnd(MAX_FILE, ' '));
    expect(exact.byteLength).toBe(MAX_FILE);
    const taken = await openai.files.create({ file: await toFile(exact, 'in.jsonl'), purpose: 'batch' });
    expect(taken.bytes).toBe(MAX_FILE);
    const over = await openai.files.create({ file: await toFile(Buffer.concat([exact, Buffer.from(' ')]), 'in.jsonl'), purpose: 'batch' }).catch((e) => e);
    expect(over.status).toBe(413);
    expect(over.error.param).toBe('file');
  });

  it('lines run outside the key’s per-minute limit, at the list price when the model has no batch price, and /key counts them', async () => {
    // The key's four requests: the upload, the batch, one direct call and /key. Its five lines
    // are not requests of the key: counted, the third would have been refused.
    const openai = client(rateKey);
    const ids = ['r1', 'r2', 'r3', 'r4', 'r5'];
    const { batch } = await createChatBatch(openai, MODEL, ids);
    await eventually(async () => (await gw.stores.batches.getBatch(ACCOUNT, batch.id))?.status === 'completed', 'the batch completed', 10_000);
    expect((await gw.stores.batches.getBatch(ACCOUNT, batch.id))!.requestCounts).toEqual({ total: 5, completed: 5, failed: 0 });
    // The same call made directly (the same usage from the upstream) costs what each line did.
    const direct = await openai.chat.completions.create({ model: MODEL, max_tokens: 20, messages: [{ role: 'user', content: 'r1' }] }).withResponse();
    expect(direct.data.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7 });
    const requestId = direct.response.headers.get('x-request-id');
    const charges = await chargesOf(gw.stores.billing.ledger(ACCOUNT));
    const lines = charges.filter((e) => e.id.startsWith(`${batch.id}:`));
    const call = charges.find((e) => e.id === requestId);
    expect(lines).toHaveLength(5);
    expect(call).toBeDefined();
    for (const l of lines) expect(l.cost).toBe(call!.cost);
    // /key counts the batch's spend and the direct call's (a new key: nothing before).
    const res = await fetch(`${gw.baseURL}/key`, { headers: { authorization: `Bearer ${rateKey}` } });
    expect(res.status).toBe(200);
    const usage = ((await res.json()) as { data: { usage: number } }).data.usage;
    const spent = lines.reduce((s, e) => s + e.cost, 0n) + call!.cost;
    expect(Math.round(usage * 1e9)).toBe(Number(spent));
  });

  it('a batch the key’s monthly cap cannot hold is 402, and nothing of it runs', async () => {
    const openai = client(cappedKey);
    const calls = up.requests.length;
    const err = await createChatBatch(openai, MODEL, ['c1', 'c2']).catch((e) => e);
    expect(err.status).toBe(402);
    expect(await gw.stores.batches.listBatches(CAPPED, { order: 'desc', limit: 10 })).toEqual([]);
    expect(up.requests.length).toBe(calls);
    expect((await gw.stores.billing.wallet(CAPPED)).held).toBe(0n);
  });
});
