/**
 * Ids a store cannot hold are unknown ids. PostgreSQL cannot keep a NUL (U+0000) in a text
 * value, and a statement that binds one fails like a database that is down: a client sending
 * one in a `brand` or `knowledge` id, or in a job id, must get the 404 of an unknown id
 * (brand_not_found, knowledge_not_found, job_not_found), never a 503 "store unreachable", on
 * every driver. Run on memory and on PostgreSQL (a fresh schema, dropped after).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import type { Gateway } from '../../src/gateway.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, MODEL, makeGateway, testConfig } from '../helpers/gateway.js';
import { mediaModels } from '../helpers/media.js';

const SCHEMA = freshSchema();
const pgDown = await postgresProblem(POSTGRES_URL);
let schemaMade = false;

afterAll(async () => {
  if (schemaMade) await dropSchema(SCHEMA);
});

const drivers: Array<[string, () => Promise<Stores | undefined>]> = [
  ['memory', async () => undefined],
  [
    'postgres',
    async () => {
      expect(pgDown, `PostgreSQL at ${POSTGRES_URL}`).toBeNull();
      schemaMade = true;
      return createPostgresStores({ url: POSTGRES_URL, schema: SCHEMA, maxConnections: 4 });
    },
  ],
];

async function open(given: Stores | undefined): Promise<{ gateway: Gateway; stores: Stores; devKey: string }> {
  const setup = testConfig({ models: mediaModels('media'), limits: { jobPollIntervalMs: 50 } });
  setup.options.upstreams = { ...setup.options.upstreams, media: { simulate: true, imageDelayMs: 0, videoDurationMs: 200 } };
  const { gateway, stores } = await makeGateway({
    ...setup.options,
    ...(given ? { stores: given } : {}),
    brands: [{ id: 'kettleco', account: ACCOUNT, name: 'KettleCo', voice: 'Cheerful.' }],
    documents: [{ id: 'returns', account: ACCOUNT, brand: 'kettleco', title: 'Returns', text: 'Returns within 45 days.' }],
  });
  return { gateway, stores, devKey: setup.devKey };
}

describe.each(drivers)('ids with a NUL on %s', (_name, make) => {
  it('brand and knowledge: 404 brand_not_found / knowledge_not_found, never 503', async () => {
    const { gateway, stores, devKey } = await open(await make());
    try {
      const chat = async (extra: Record<string, unknown>) => {
        const res = await gateway.fetch(
          new Request('http://gw.test/v1/chat/completions', {
            method: 'POST',
            headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'How long for returns?' }], ...extra }),
          }),
          { clientAddress: '198.51.100.30' },
        );
        return { status: res.status, error: ((await res.json()) as { error?: { code: string; param: string | null } }).error };
      };
      // The real ids still work: the store is up.
      expect((await chat({ brand: 'kettleco', knowledge: 'returns' })).status).toBe(200);
      for (const brand of ['\u0000', 'kettle\u0000co', 'kettleco\u0000']) {
        const r = await chat({ brand });
        expect(r.status, JSON.stringify(brand)).toBe(404);
        expect(r.error).toMatchObject({ code: 'brand_not_found', param: 'brand' });
      }
      for (const knowledge of ['\u0000', 'ret\u0000urns', ['returns', 'x\u0000'], 'kettleco\u0000']) {
        const r = await chat({ knowledge });
        expect(r.status, JSON.stringify(knowledge)).toBe(404);
        expect(r.error).toMatchObject({ code: 'knowledge_not_found', param: 'knowledge' });
      }
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });

  it('job ids: GET / DELETE of images and videos and a video’s content are 404 job_not_found, never 503', async () => {
    const { gateway, stores, devKey } = await open(await make());
    try {
      const call = async (method: string, path: string) => {
        const res = await gateway.fetch(new Request(`http://gw.test/v1${path}`, { method, headers: { authorization: `Bearer ${devKey}` } }), {
          clientAddress: '198.51.100.31',
        });
        return { status: res.status, error: ((await res.json()) as { error?: { code: string } }).error };
      };
      const probes: Array<[string, string]> = [];
      for (const id of ['%00', 'video_%00', `video_${'a'.repeat(32)}%00`, 'img_x%00y']) {
        probes.push(['GET', `/videos/${id}`], ['GET', `/videos/${id}/content`], ['DELETE', `/videos/${id}`], ['GET', `/images/${id}`]);
      }
      for (const [method, path] of probes) {
        const r = await call(method, path);
        expect(r.status, `${method} ${path}`).toBe(404);
        expect(r.error?.code, `${method} ${path}`).toBe('job_not_found');
      }
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });
});
