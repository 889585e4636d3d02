/**
 * A file uploaded with `expires_after` (OpenAI's Files API, through the official SDK): its
 * `expires_at` says when, a bad anchor or lifetime is a 400 naming the field, and once the
 * time has come it reads as deleted: not retrieved, not downloaded, not listed, not a batch's
 * input.
 */
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { ACCOUNT, MODEL, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';

let clock = 1_800_000_000_000;
let gw: RunningGateway;
let openai: OpenAI;

beforeAll(async () => {
  const setup = testConfig();
  gw = await startGateway({ ...setup.options, now: () => clock });
  openai = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
});
afterAll(() => gw?.close());

const line = JSON.stringify({ custom_id: 'a', method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] } });
const upload = async (expires?: { anchor: string; seconds: number }) =>
  openai.files.create({ file: await toFile(Buffer.from(line), 'in.jsonl'), purpose: 'batch', ...(expires ? { expires_after: expires as { anchor: 'created_at'; seconds: number } } : {}) });

describe('a file that expires', () => {
  it('says when, and reads as deleted from then on', async () => {
    const kept = await upload();
    expect(kept.expires_at).toBeNull();
    const f = await upload({ anchor: 'created_at', seconds: 3600 });
    expect(f.expires_at).toBe(f.created_at + 3600);
    expect((await openai.files.retrieve(f.id)).expires_at).toBe(f.created_at + 3600);

    clock += 3_600_000;
    await expect(openai.files.retrieve(f.id)).rejects.toMatchObject({ status: 404 });
    await expect(openai.files.content(f.id)).rejects.toMatchObject({ status: 404 });
    const listed = (await openai.files.list()).data.map((x) => x.id);
    expect(listed).toContain(kept.id);
    expect(listed).not.toContain(f.id);
    const batch = await openai.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).catch((e) => e);
    expect(batch.status).toBe(404);
    expect((await openai.files.retrieve(kept.id)).id).toBe(kept.id);
  });

  it('a list paged past expired files still finds every file that is there', async () => {
    const kept: string[] = [];
    for (let i = 0; i < 3; i++) {
      await upload({ anchor: 'created_at', seconds: 3600 });
      await upload({ anchor: 'created_at', seconds: 3600 });
      kept.push((await upload()).id);
    }
    clock += 3_600_000;
    const seen: string[] = [];
    for await (const f of openai.files.list({ limit: 1 })) seen.push(f.id);
    for (const id of kept) expect(seen).toContain(id);
    expect(seen).toHaveLength(new Set(seen).size);
  });

  it('a list past thousands of expired files reads the store a few times, not once per page size', async () => {
    const stores = createMemoryStores();
    const list = stores.batches.listFiles.bind(stores.batches);
    let reads = 0;
    stores.batches.listFiles = (accountId, page) => {
      reads++;
      return list(accountId, page);
    };
    const setup = testConfig();
    const own = await startGateway({ ...setup.options, stores, now: () => clock });
    try {
      const client = new OpenAI({ apiKey: setup.devKey, baseURL: own.baseURL, maxRetries: 0 });
      const kept = (await client.files.create({ file: await toFile(Buffer.from(line), 'in.jsonl'), purpose: 'batch' })).id;
      const createdAt = Math.floor(clock / 1000);
      for (let i = 0; i < 3_000; i++) {
        const id = `file-expired${i}`;
        await stores.batches.putFile({ id, accountId: ACCOUNT, purpose: 'batch', filename: 'x.jsonl', bytes: 1, createdAt: createdAt + 1, expiresAt: createdAt + 3_600 }, new Uint8Array([10]));
      }
      clock += 3_600_000;
      // The list's reads only (an upload reads the account's files too, to count their bytes).
      reads = 0;
      const page = await client.files.list({ limit: 1 });
      expect(page.data.map((f) => f.id)).toEqual([kept]);
      expect(page.has_more).toBe(false);
      // 2, 8, 32, 128, 512, 2,048, then up to 10,000 at a time: 7 reads (one of 2 each: 1,500).
      expect(reads).toBeLessThanOrEqual(7);
    } finally {
      await own.close();
    }
  });

  it('a bad anchor or lifetime is a 400 naming the field', async () => {
    const anchor = await upload({ anchor: 'uploaded_at', seconds: 3600 }).catch((e) => e);
    expect(anchor.status).toBe(400);
    expect(anchor.error.param).toBe('expires_after[anchor]');
    for (const seconds of [10, 2_592_001]) {
      const bad = await upload({ anchor: 'created_at', seconds }).catch((e) => e);
      expect(bad.status).toBe(400);
      expect(bad.error.param).toBe('expires_after[seconds]');
    }
  });
});
