/**
 * A request whose shape a client controls cannot freeze the gateway: over real HTTP, a video
 * submission whose one multipart part repeats a header line tens of thousands of times (from
 * a tenant with an empty wallet: it is read before any wallet check) is answered 400 quickly,
 * and `/health` keeps answering while such requests arrive; a JSON body nested thousands of
 * levels deep is 400 invalid_request, at /v1 and at the admin API.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNT, makeGateway, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { mediaModels } from '../helpers/media.js';
import type { Gateway } from '../../src/gateway.js';
import { MAX_JSON_DEPTH } from '../../src/http/json.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';

const BOUNDARY = 'rb7MA4YWxkTrZu0gW';

/** One multipart part whose header block repeats `X-A: b` `times` times (160 KB at 20,000). */
function repeatedHeaderBody(times: number): Buffer {
  const lines = ['Content-Disposition: form-data; name="prompt"', ...Array<string>(times).fill('X-A: b')];
  return Buffer.from(`--${BOUNDARY}\r\n${lines.join('\r\n')}\r\n\r\na lighthouse\r\n--${BOUNDARY}--\r\n`);
}

/** A JSON object nesting `depth` levels in all. */
const nested = (depth: number) => `{"model":"x","a":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;

describe('a multipart video submission with a flood of header lines', () => {
  let gw: RunningGateway;
  let devKey: string;
  beforeAll(async () => {
    const setup = testConfig({ walletUsd: 0, models: mediaModels('test') });
    devKey = setup.devKey;
    gw = await startGateway(setup.options);
  });
  afterAll(() => gw.close());

  it('is 400 naming the limit, quickly, while /health keeps answering', async () => {
    const post = async (times: number) => {
      const started = performance.now();
      const res = await fetch(`${gw.baseURL}/videos`, {
        method: 'POST',
        headers: { authorization: `Bearer ${devKey}`, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
        body: new Uint8Array(repeatedHeaderBody(times)),
      });
      const body = (await res.json()) as { error: { code: string; param: string | null; message: string } };
      return { status: res.status, error: body.error, ms: performance.now() - started };
    };
    let healthWorst = 0;
    let posting = true;
    const healthChecks = (async () => {
      while (posting) {
        const started = performance.now();
        expect((await fetch(`${gw.origin}/health`)).status).toBe(200);
        healthWorst = Math.max(healthWorst, performance.now() - started);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    // Three of the 160 KB bodies and one of 480 KB, at once.
    const answers = await Promise.all([post(20_000), post(20_000), post(20_000), post(60_000)]);
    posting = false;
    await healthChecks;
    for (const a of answers) {
      expect(a.status).toBe(400);
      expect(a.error).toMatchObject({ code: 'invalid_request', param: 'prompt' });
      expect(a.error.message).toMatch(/at most \d+ (header lines|bytes)/);
      // Generous for a loaded machine; the quadratic reader took seconds to minutes here.
      expect(a.ms).toBeLessThan(5_000);
    }
    expect(healthWorst).toBeLessThan(2_000);
    expect(await gw.stores.billing.openHolds(ACCOUNT)).toBe(0);
  });
});

describe('a JSON body nested too deep', () => {
  let gateway: Gateway;
  let devKey: string;
  beforeAll(async () => {
    const setup = testConfig({ models: mediaModels('test') });
    devKey = setup.devKey;
    ({ gateway } = await makeGateway({ ...setup.options, admin: { tokenSha256: ADMIN_SHA } }));
  });
  afterAll(() => gateway.dispose());

  const send = async (path: string, body: string, auth: string) => {
    const res = await gateway.fetch(
      new Request(`http://gw.test${path}`, { method: 'POST', headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json' }, body }),
      { clientAddress: '192.0.2.1' },
    );
    return { status: res.status, error: ((await res.json()) as { error?: { code: string; message: string } }).error };
  };

  it.each([
    ['/v1/chat/completions', 'dev'],
    ['/v1/videos', 'dev'],
    ['/admin/v1/accounts', 'admin'],
  ])('%s: deeper than the limit is 400 invalid_request; at the limit it is not refused for depth', async (path, who) => {
    const auth = () => (who === 'admin' ? ADMIN_TOKEN : devKey);
    for (const depth of [MAX_JSON_DEPTH + 1, 10_000, 200_000]) {
      const { status, error } = await send(path, nested(depth), auth());
      expect(status).toBe(400);
      expect(error).toMatchObject({ code: 'invalid_request', message: expect.stringContaining(`${MAX_JSON_DEPTH} levels`) });
    }
    const atLimit = await send(path, nested(MAX_JSON_DEPTH), auth());
    expect(atLimit.error?.message ?? '').not.toContain('levels deep');
  });
});
