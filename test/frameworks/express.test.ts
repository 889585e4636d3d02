/** The shared framework checks against Express 5, in process, mounted under a prefix. */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Server } from 'node:http';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toExpress } from '../../adapters/express.js';
import { createGateway, type Gateway } from '../../src/index.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { frameworkCases, frameworkConfig, KEY, MODEL } from './shared.case.js';
import { REPLY, startSlowUpstream, type SlowUpstream } from './slow-upstream.js';
import { repoRoot, spawnServer } from './spawn.js';

const DEMO_KEY = 'sk-mg-DEMOdemoDEMOdemoDEMOdemoDEMOdemoDEMOdemo0001';

const quiet = { info() {}, warn() {}, error() {} };

async function listen(app: express.Express): Promise<{ server: Server; origin: string }> {
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

describe('express', () => {
  let upstream: SlowUpstream;
  let media: MediaUpstream;
  let gateway: Gateway;
  let server: Server;
  let baseURL: string;

  beforeAll(async () => {
    upstream = await startSlowUpstream();
    media = await startMediaUpstream();
    gateway = createGateway({ ...frameworkConfig(upstream.url, media.url), logger: quiet });
    const app = express();
    app.use('/api/gateway', toExpress(gateway));
    app.use(express.json());
    app.post('/echo', (req, res) => {
      res.json(req.body);
    });
    const started = await listen(app);
    server = started.server;
    baseURL = `${started.origin}/api/gateway/v1`;
  });

  afterAll(async () => {
    await close(server);
    await gateway.dispose();
    await upstream.close();
    await media.close();
  });

  frameworkCases(() => ({ baseURL, upstream, media }));

  it('leaves the rest of the app alone (its own body parser still works)', async () => {
    const res = await fetch(baseURL.replace('/api/gateway/v1', '/echo'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"ok":true}',
    });
    expect(await res.json()).toEqual({ ok: true });
  });
});

describe('express with express.json() in front of the gateway', () => {
  let upstream: SlowUpstream;
  let gateway: Gateway;
  let server: Server;
  let baseURL: string;

  beforeAll(async () => {
    upstream = await startSlowUpstream({ intervalMs: 10 });
    gateway = createGateway({ ...frameworkConfig(upstream.url), logger: quiet });
    const app = express();
    app.use(express.json());
    app.use(toExpress(gateway));
    const started = await listen(app);
    server = started.server;
    baseURL = `${started.origin}/v1`;
  });

  afterAll(async () => {
    await close(server);
    await gateway.dispose();
    await upstream.close();
  });

  it('re-serialises the parsed body', async () => {
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }] }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]?.message.content).toBe(REPLY);
  });
});

describe('express: shutdown', () => {
  it('the example, sent SIGTERM mid-stream, finishes the stream to [DONE] before it exits', async () => {
    // The demo config with a slow simulator: the stream is still going when the signal comes.
    const dir = await mkdtemp(join(tmpdir(), 'mg-express-drain-'));
    const config = JSON.parse(await readFile(join(repoRoot, 'examples/gateway.config.json'), 'utf8')) as Record<string, any>;
    for (const u of Object.values(config.upstreams as Record<string, Record<string, unknown>>)) if (u.simulate) u.chunkDelayMs = 150;
    config.storage = { driver: 'memory' };
    await writeFile(join(dir, 'slow.json'), JSON.stringify(config));
    const tsx = join(repoRoot, 'node_modules', 'tsx', 'dist', 'loader.mjs');
    const server = await spawnServer(process.execPath, ['--import', tsx, join(repoRoot, 'examples/express/server.ts')], {
      env: { PORT: '0', MODEL_GATEWAY_CONFIG: join(dir, 'slow.json') },
      ready: /on Express: (http:\/\/\S+\/v1)/,
      timeoutMs: 30_000,
      cwd: dir,
    });
    try {
      const res = await fetch(`${server.match[1]}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim/fast-chat', stream: true, messages: [{ role: 'user', content: 'Tell me a story.' }] }),
      });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      let text = '';
      let reads = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
        if (++reads === 2) process.kill(server.pid, 'SIGTERM');
      }
      expect(reads).toBeGreaterThan(2);
      expect(text).not.toContain('"error"');
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      expect(await server.exited).toBe(0);
    } finally {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
