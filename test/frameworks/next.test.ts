/**
 * The shared framework checks against examples/next-app: the package is built (the example
 * imports it by name), then `next build` and `next start` on a free port. Slow: run once.
 * dist/ and examples/next-app/.next are shared by every run in this checkout, so a lock keeps
 * concurrent runs from rebuilding them under each other.
 */
import { afterAll, beforeAll, describe } from 'vitest';
import { frameworkCases, frameworkConfig } from './shared.case.js';
import { startSlowUpstream, type SlowUpstream } from './slow-upstream.js';
import { acquireLock, freePort, repoRoot, run, spawnServer, writeConfig, type Spawned } from './spawn.js';

const next = `${repoRoot}node_modules/.bin/next`;

describe('next', () => {
  let upstream: SlowUpstream;
  let server: Spawned | undefined;
  let baseURL: string;
  let release: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    release = await acquireLock('next-example', 200_000);
    upstream = await startSlowUpstream();
    await run(`${repoRoot}node_modules/.bin/tsup`, []);
    await run(next, ['build', 'examples/next-app'], { env: { NEXT_TELEMETRY_DISABLED: '1' } });
    const config = await writeConfig(frameworkConfig(upstream.url));
    const port = await freePort();
    server = await spawnServer(next, ['start', 'examples/next-app', '--port', String(port), '--hostname', '127.0.0.1'], {
      env: { MODEL_GATEWAY_CONFIG: config, NEXT_TELEMETRY_DISABLED: '1' },
      ready: /Ready in/,
      timeoutMs: 30_000,
    });
    baseURL = `http://127.0.0.1:${port}/api/v1`;
  }, 420_000);

  afterAll(async () => {
    await server?.stop();
    await upstream?.close();
    await release?.();
  });

  frameworkCases(() => ({ baseURL, upstream }));
});
