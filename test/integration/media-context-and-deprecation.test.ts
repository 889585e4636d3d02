/**
 * The media endpoints and the gateway's own fields and headers. `brand` and `knowledge` are
 * the gateway's (applied to text, then removed): a media endpoint does not apply them, so it
 * refuses them, naming the field, rather than relay an account's document ids upstream. And a
 * call to a Deprecated media model says so (`Deprecation`, `Sunset`), as a text call does.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNT, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { AUDIO, IMAGE, VIDEO, mediaSetup } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';

let up: MediaUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startMediaUpstream();
  const setup = mediaSetup(up.url, { keyRequestsPerMinute: 1000, ipRequestsPerMinute: 1000 });
  devKey = setup.devKey;
  for (const m of setup.options.models ?? []) if (m.type !== 'text') Object.assign(m, { posture: 'Deprecated', retiresAt: '2999-01-01' });
  gw = await startGateway({
    ...setup.options,
    brands: [{ id: 'kettleco', account: ACCOUNT, name: 'KettleCo', voice: 'Warm.' }],
    documents: [{ id: 'secret-roadmap', account: ACCOUNT, brand: 'kettleco', title: 'Roadmap', text: 'We ship the Model Z kettle in March.' }],
  });
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const cases: Array<[string, Record<string, unknown>]> = [
  ['/images/generations', { model: IMAGE, prompt: 'a kettle', size: '512x512' }],
  ['/audio/speech', { model: AUDIO, input: 'Hello there', voice: 'alloy' }],
  ['/videos', { model: VIDEO, prompt: 'a kettle boiling', seconds: '4', size: '640x480' }],
];

const post = (path: string, body: Record<string, unknown>) =>
  fetch(`${gw.baseURL}${path}`, { method: 'POST', headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('media endpoints', () => {
  for (const [path, body] of cases) {
    it(`${path}: brand and knowledge are 400 naming the field, and nothing reaches the upstream`, async () => {
      const before = up.requests.length;
      for (const [field, value] of [
        ['brand', 'kettleco'],
        ['knowledge', ['secret-roadmap']],
      ] as const) {
        const res = await post(path, { ...body, [field]: value });
        const { error } = (await res.json()) as { error: { code: string; param: string } };
        expect([res.status, error.code, error.param]).toEqual([400, 'invalid_request', field]);
      }
      expect(up.requests.length).toBe(before);
    });

    it(`${path}: a Deprecated model's answer carries Deprecation and Sunset`, async () => {
      const res = await post(path, body);
      await res.arrayBuffer();
      expect(res.status).toBeLessThan(300);
      expect({ deprecation: res.headers.get('deprecation'), sunset: res.headers.get('sunset') }).toEqual({
        deprecation: 'true',
        sunset: 'Tue, 01 Jan 2999 00:00:00 GMT',
      });
    });
  }
});
