/**
 * The quick start has a console and metrics: `model-gateway serve` on examples/gateway.config.json
 * names the console's URL in its start line and prints the demo admin token (the config holds
 * only its SHA-256); that token opens /admin/v1, /admin serves the page and /metrics answers.
 * A config with any other admin token gets no token printed: that one is the operator's secret.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_SHA } from './token.js';
import { repoRoot, spawnServer, writeConfig, type Spawned } from '../frameworks/spawn.js';

const tsx = join(repoRoot, 'node_modules', 'tsx', 'dist', 'loader.mjs');
const EXAMPLE = join(repoRoot, 'examples', 'gateway.config.json');
const serveArgs = (config: string) => ['--import', tsx, join(repoRoot, 'src', 'cli.ts'), 'serve', '--config', config, '--port', '0'];

describe('npm start (the CLI on the example config)', () => {
  let cwd: string;
  let server: Spawned;
  let origin: string;
  let consoleUrl: string;
  let metricsUrl: string;
  let token: string;

  beforeAll(async () => {
    // A fresh directory: the example config keeps its SQLite books at ./data/gateway.db.
    cwd = await mkdtemp(join(tmpdir(), 'mg-quick-start-'));
    server = await spawnServer(process.execPath, serveArgs(EXAMPLE), {
      cwd,
      ready: /listening on (http:\/\/\S+)\/v1 .*; console at (\S+), metrics at (\S+)\ndemo admin token [^\n]*: (\S+)\n/,
      timeoutMs: 30_000,
    });
    [, origin, consoleUrl, metricsUrl, token] = server.match as unknown as [string, string, string, string, string];
  }, 60_000);

  afterAll(async () => {
    await server?.stop();
    if (cwd) await rm(cwd, { recursive: true, force: true });
  });

  it('names the console and metrics URLs and prints a demo admin token whose digest is the config’s', async () => {
    expect(consoleUrl).toBe(`${origin}/admin`);
    expect(metricsUrl).toBe(`${origin}/metrics`);
    const config = JSON.parse(await readFile(EXAMPLE, 'utf8')) as { admin: { tokenSha256: string } };
    expect(createHash('sha256').update(token).digest('hex')).toBe(config.admin.tokenSha256);
    // The config holds the digest only, never the token.
    expect(JSON.stringify(config)).not.toContain(token);
  });

  it('serves the console page at /admin', async () => {
    const res = await fetch(consoleUrl);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await res.text()).toContain('model-gateway console');
  });

  it('opens /admin/v1/accounts with the printed token (and only with it)', async () => {
    const res = await fetch(`${origin}/admin/v1/accounts`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Array<{ id: string }> };
    expect(body.data.map((a) => a.id)).toContain('demo');
    expect((await fetch(`${origin}/admin/v1/accounts`)).status).toBe(401);
  });

  it('serves Prometheus metrics at /metrics', async () => {
    const res = await fetch(metricsUrl);
    expect(res.status).toBe(200);
    expect(await res.text()).toMatch(/^# HELP /m);
  });
});

describe('the CLI on a config with its own admin token', () => {
  it('names the console but prints no admin token', async () => {
    const example = JSON.parse(await readFile(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const config = await writeConfig({ ...example, admin: { tokenSha256: ADMIN_SHA }, storage: { driver: 'memory' } });
    const server = await spawnServer(process.execPath, serveArgs(config), { ready: /listening on .*\n/, timeoutMs: 30_000 });
    try {
      // Whatever follows the start line comes in the same write: give it a moment anyway.
      await new Promise((r) => setTimeout(r, 300));
      expect(server.output()).toMatch(/; console at http:\/\/\S+\/admin, metrics at /);
      expect(server.output()).not.toMatch(/admin token/);
    } finally {
      await server.stop();
    }
  }, 60_000);
});
