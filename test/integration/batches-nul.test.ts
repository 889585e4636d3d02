/**
 * What a batch or a file keeps from the client's request (a batch's metadata, a file's name)
 * with a NUL in it is 400 naming the field, on every driver: never 503 (PostgreSQL cannot store
 * a NUL in text, and a store failure would tell the client to try again).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { MODEL, startGateway, testConfig } from '../helpers/gateway.js';

const pgUp = (await postgresProblem(POSTGRES_URL)) === null;
const SCHEMA = freshSchema('mgbnul');
afterAll(async () => {
  if (pgUp) await dropSchema(SCHEMA);
});

const drivers: Array<[string, boolean, () => Promise<Stores>]> = [
  ['memory', true, async () => createMemoryStores()],
  ['postgres', pgUp || process.env.CI === 'true', () => createPostgresStores({ url: POSTGRES_URL, schema: SCHEMA, maxConnections: 2 })],
];

const LINE = `${JSON.stringify({ custom_id: 'a', method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] } })}\n`;

describe.each(drivers)('%s: NUL in what a batch or file keeps', (_driver, enabled, makeStores) => {
  it.skipIf(!enabled)('a file name or a metadata key or value with NUL is 400 naming it; without it, taken', async () => {
    const setup = testConfig({});
    const gw = await startGateway({ ...setup.options, stores: await makeStores() });
    const auth = { authorization: `Bearer ${setup.devKey}` };
    const upload = (name: string) => {
      const form = new FormData();
      form.append('purpose', 'batch');
      form.append('file', new Blob([LINE]), name);
      return fetch(`${gw.baseURL}/files`, { method: 'POST', headers: auth, body: form });
    };
    try {
      const badFile = await upload('in\u0000put.jsonl');
      expect(badFile.status).toBe(400);
      expect(((await badFile.json()) as { error: unknown }).error).toMatchObject({ code: 'invalid_request', param: 'file' });
      const file = (await (await upload('input.jsonl')).json()) as { id: string };
      const create = (metadata: Record<string, string>) =>
        fetch(`${gw.baseURL}/batches`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata }),
        });
      for (const metadata of [{ team: 'a\u0000b' }, { 't\u0000': 'x' }] as Record<string, string>[]) {
        const r = await create(metadata);
        expect(r.status).toBe(400);
        expect(((await r.json()) as { error: unknown }).error).toMatchObject({ code: 'invalid_request', param: 'metadata' });
      }
      expect((await create({ team: 'evals' })).status).toBe(200);
    } finally {
      await gw.close();
    }
  });
});
