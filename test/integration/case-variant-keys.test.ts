/**
 * A body field spelled in other letters ("Model", "N", "Max_Completion_Tokens") is read by no
 * check of the gateway, but an upstream whose JSON decoder matches keys ignoring case (Go's
 * encoding/json) takes it for the field: another model, more choices, more tokens than were
 * held and billed. Such a body is refused (400 naming the key) before anything is held or sent;
 * a key the API does not have, in any letters, still goes through.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
});

describe('a body field spelled in other letters', () => {
  it('is refused naming it, and nothing reaches the upstream', async () => {
    const messages = [{ role: 'user', content: 'hi' }];
    // And the two letters Go folds to ASCII: the Kelvin sign (k) and the long s.
    for (const extra of [{ Model: 'gpt-expensive' }, { N: 50 }, { Max_Completion_Tokens: 100000 }, { STREAM: true }, { 'max_completion_to\u212Aens': 100000 }, { '\u017Ftream': true }]) {
      const before = up.requests.length;
      const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages, ...extra });
      const key = Object.keys(extra)[0]!;
      expect(res.status, key).toBe(400);
      expect(((await res.json()) as { error: { code: string; param: string } }).error).toMatchObject({ code: 'invalid_request', param: key });
      expect(up.requests.length, key).toBe(before);
    }
    // Another key in capitals that is no field of the API is relayed as before.
    const fine = await postChat(gw.baseURL, devKey, { model: MODEL, messages, X_Trace: 'a' });
    expect(fine.status).toBe(200);
  });
});
