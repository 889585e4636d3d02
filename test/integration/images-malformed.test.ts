/**
 * An images answer that lists no images (an error object sent with a 200, an array, `data` not
 * a list, no `data` at all) delivers none: it is a 502 upstream_error and its hold is released.
 * Before, it went to the client as a success and was billed the number of images asked for.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { IMAGE, mediaModels } from '../helpers/media.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 100, models: mediaModels('test') });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const answering = (body: string) =>
  up.setBehavior({
    kind: 'custom',
    handle(_req, res) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
    },
  });

const generate = () =>
  fetch(`${gw.baseURL}/images/generations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: IMAGE, prompt: 'a cat', n: 2 }),
  });

describe('an images answer that lists no images', () => {
  it('is a 502, and nothing is billed', async () => {
    for (const body of ['{"error":{"message":"bad"}}', '[1,2,3]', '{"created":1}', '{"created":1,"data":{"a":1}}']) {
      answering(body);
      const res = await generate();
      expect(res.status, body).toBe(502);
      expect(((await res.json()) as { error: { code: string } }).error.code, body).toBe('upstream_error');
    }
    await eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0, 'no open hold');
    expect(await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).toEqual([]);
    // A whole answer is billed per image it lists.
    answering(JSON.stringify({ created: 1, data: [{ b64_json: 'iVBORw0KGgo=' }] }));
    expect((await generate()).status).toBe(200);
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'one charge');
    expect((await chargesOf(gw.gateway.admin.ledger(ACCOUNT)))[0]!.units).toMatchObject({ kind: 'images', images: 1 });
  });
});
