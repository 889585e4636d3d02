/**
 * The Node examples and the CLI start with their one command and serve the demo config.
 * (examples/bun and examples/next-app run the full framework checks in bun.test.ts and
 * next.test.ts.)
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigFile, parseOptions } from '../../src/index.js';
import { repoRoot, spawnServer } from './spawn.js';

const DEMO_KEY = 'sk-mg-DEMOdemoDEMOdemoDEMOdemoDEMOdemoDEMOdemo0001';

// Run from a fresh directory: the demo config keeps its SQLite books at ./data/gateway.db.
const tsx = join(repoRoot, 'node_modules', 'tsx', 'dist', 'loader.mjs');
const at = (path: string) => join(repoRoot, path);
const servers = [
  {
    name: 'standalone (the CLI)',
    args: ['--import', tsx, at('src/cli.ts'), 'serve', '--config', at('examples/gateway.config.json'), '--port', '0'],
    ready: /listening on (http:\/\/\S+\/v1)/,
  },
  { name: 'express', args: ['--import', tsx, at('examples/express/server.ts')], ready: /on Express: (http:\/\/\S+\/v1)/ },
  { name: 'fastify', args: ['--import', tsx, at('examples/fastify/server.ts')], ready: /on Fastify: (http:\/\/\S+\/v1)/ },
];

describe('examples', () => {
  let cwd: string;
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'mg-examples-'));
  });
  afterAll(async () => {
    if (cwd) await rm(cwd, { recursive: true, force: true });
  });

  for (const { name, args, ready } of servers) {
    it(`${name} serves the demo config`, async () => {
      const server = await spawnServer(process.execPath, args, { env: { PORT: '0' }, ready, timeoutMs: 30_000, cwd });
      try {
        const res = await fetch(`${server.match[1]}/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
        expect(res.status).toBe(200);
        const body = (await res.json()) as { data: Array<{ id: string }> };
        expect(body.data.map((m) => m.id)).toContain('sim/fast-chat');
        // Its books are the demo config's SQLite file, under the working directory.
        expect(await readdir(join(cwd, 'data'))).toContain('gateway.db');
      } finally {
        await server.stop();
      }
    });
  }

  it('standalone/openai.config.json is a valid config once its variables are set', async () => {
    const config = await loadConfigFile(`${repoRoot}examples/standalone/openai.config.json`, {
      OPENAI_API_KEY: 'sk-test',
      MODEL_GATEWAY_DEV_KEY: `sk-mg-${'a1'.repeat(22)}`,
    });
    expect(parseOptions(config).models[0]?.upstreamModel).toBe('gpt-4o-mini');
    await expect(loadConfigFile(`${repoRoot}examples/standalone/openai.config.json`, {})).rejects.toThrow(/OPENAI_API_KEY/);
  });

  it("deploy/gateway.config.json (the container image's) is a valid config once its variables are set", async () => {
    const config = parseOptions(
      await loadConfigFile(`${repoRoot}examples/deploy/gateway.config.json`, { OPENAI_API_KEY: 'sk-test', ADMIN_TOKEN_SHA256: 'ab'.repeat(32) }),
    );
    expect(config.storage).toMatchObject({ driver: 'sqlite', path: './data/gateway.db' });
    expect(config.trustProxy).toContain('127.0.0.1');
  });
});
