/**
 * What an account may keep of files (`limits.maxFileBytesPerAccount`): uploads past it are
 * refused; a file that expired counts for nothing, and the next upload deletes its bytes (they
 * read as deleted already), but not the input of a batch still running.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import type { Stores } from '../../src/stores/types.js';
import { batchRecord } from '../helpers/batches.js';
import { ACCOUNT, makeGateway, testConfig } from '../helpers/gateway.js';

let clock = Date.UTC(2026, 10, 1);
let gateway: Gateway;
let stores: Stores;
let devKey: string;

beforeAll(async () => {
  const setup = testConfig({ limits: { maxFileBytes: 2_000, maxFileBytesPerAccount: 3_000 } });
  devKey = setup.devKey;
  ({ gateway, stores } = await makeGateway({ ...setup.options, now: () => clock }));
});
afterAll(async () => {
  await gateway?.dispose();
});

async function upload(bytes: number, expiresSeconds?: number): Promise<Response> {
  const form = new FormData();
  form.set('purpose', 'batch');
  if (expiresSeconds !== undefined) {
    form.set('expires_after[anchor]', 'created_at');
    form.set('expires_after[seconds]', String(expiresSeconds));
  }
  form.set('file', new Blob([Buffer.alloc(bytes, 0x20)]), 'input.jsonl');
  return gateway.fetch(new Request('http://gw.test/v1/files', { method: 'POST', headers: { authorization: `Bearer ${devKey}` }, body: form }), { clientAddress: '192.0.2.7' });
}

it('an expired file counts for nothing, and the next upload deletes its bytes', async () => {
  const first = await upload(2_000, 3_600);
  expect(first.status).toBe(200);
  const { id } = (await first.json()) as { id: string };
  const past = await upload(1_500);
  expect(past.status).toBe(400);
  expect(((await past.json()) as { error: { param: string } }).error.param).toBe('file');
  // An hour later the first file has expired: it reads as deleted, and is no longer counted.
  clock += 3_601 * 1000;
  expect((await upload(1_500)).status).toBe(200);
  expect(await stores.batches.fileContent(ACCOUNT, id)).toBeNull();
  expect(await stores.batches.getFile(ACCOUNT, id)).toBeNull();
});

it("a running batch's expired input is not deleted: the batch (or the instance that adopts it) reads it on", async () => {
  const input = await upload(1_000, 3_600);
  const { id } = (await input.json()) as { id: string };
  const createdAt = Math.floor(clock / 1000);
  // Run by another instance, which renews its claim (this one waits a TTL before adopting it).
  await stores.batches.createBatch(
    batchRecord(ACCOUNT, {
      id: 'batch_running_on_expired_input',
      inputFileId: id,
      createdAt,
      inProgressAt: createdAt,
      expiresAt: createdAt + 86_400,
      owner: 'gw_other',
      ownerUntil: clock + 60_000,
      rev: 1,
    }),
  );
  clock += 3_601 * 1000;
  expect((await upload(500)).status).toBe(200);
  // Expired (it reads as deleted to the client), but its bytes stay for the batch.
  expect(await stores.batches.fileContent(ACCOUNT, id)).not.toBeNull();
});
