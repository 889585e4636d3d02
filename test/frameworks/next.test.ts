/**
 * The shared framework checks against examples/next-app under `next start`: its one route,
 * app/api/[...path]/route.ts, serves /api/v1 with every method the gateway routes, and the
 * admin API beside it (the console under /api/admin is checked in Chromium by
 * test/admin/console-mounts.browser.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';
import { NEXT_START_TIMEOUT_MS, startNextExample, type NextExample } from './next-example.js';
import { frameworkCases, frameworkConfig, KEY } from './shared.case.js';
import { startSlowUpstream, type SlowUpstream } from './slow-upstream.js';

describe('next', () => {
  let upstream: SlowUpstream;
  let media: MediaUpstream;
  let app: NextExample | undefined;

  beforeAll(async () => {
    upstream = await startSlowUpstream();
    media = await startMediaUpstream();
    app = await startNextExample({ ...frameworkConfig(upstream.url, media.url), admin: { tokenSha256: ADMIN_SHA } });
  }, NEXT_START_TIMEOUT_MS);

  afterAll(async () => {
    await app?.stop();
    await upstream?.close();
    await media?.close();
  });

  frameworkCases(() => ({ baseURL: `${app!.origin}/api/v1`, upstream, media }));

  it("hands every method to the gateway: a method no route takes is the gateway's 405, not Next.js's", async () => {
    const res = await fetch(`${app!.origin}/api/v1/videos/video_x`, { method: 'PATCH', headers: { authorization: `Bearer ${KEY}` } });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET, DELETE');
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('method_not_allowed');
  });

  it('serves the admin API at /api/admin/v1 from the same route: PUT, GET and DELETE of a brand', async () => {
    const url = `${app!.origin}/api/admin/v1/accounts/acme/brands/harbour`;
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    const put = await fetch(url, { method: 'PUT', headers, body: JSON.stringify({ name: 'Harbour', voice: 'Calm and brief.' }) });
    expect(put.status).toBe(200);
    const got = await fetch(url, { headers });
    expect(((await got.json()) as { voice: string }).voice).toBe('Calm and brief.');
    const deleted = await fetch(url, { method: 'DELETE', headers });
    expect(deleted.status).toBe(200);
    await deleted.arrayBuffer();
    expect((await fetch(url, { headers })).status).toBe(404);
  });
});
