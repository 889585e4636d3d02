/**
 * Metrics are summed across workers only under `serve --workers`. An app that runs its own
 * cluster keeps prom-client's registries as it set them (its own metrics still aggregate), and
 * the gateway it embeds answers its scrape from its own process, never asking a primary that
 * does not know the gateway's protocol.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');

it("an embedder's own cluster: its metrics are untouched, and the gateway's scrape asks no primary", async () => {
  const out = await new Promise<string>((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', join(ROOT, 'test', 'fixtures', 'embedder-cluster.ts')], { cwd: ROOT, timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
    );
  });
  expect(JSON.parse(out.trim())).toEqual({ status: 200, gatewayMetrics: true, appMetric: true, asked: 0 });
}, 90_000);
