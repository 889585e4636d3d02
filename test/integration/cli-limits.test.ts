/**
 * The CLI sets a key's model allow-list, tokens per minute and budgets, and an account's
 * budgets, on durable (SQLite) storage; a bad flag is one line naming it, before any storage.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { afterAll, describe, expect, it } from 'vitest';
import { writeConfig } from '../helpers/processes.js';

const ROOT = join(import.meta.dirname, '..', '..');
const BUNDLE = join(ROOT, '.tmp', `cli-limits-${process.pid}-${randomBytes(3).toString('hex')}.mjs`);
await build({ entryPoints: [join(ROOT, 'src', 'cli.ts')], bundle: true, platform: 'node', format: 'esm', packages: 'external', outfile: BUNDLE, logLevel: 'warning' });
const dir = mkdtempSync(join(tmpdir(), 'mg-cli-limits-'));
afterAll(async () => {
  await rm(BUNDLE, { force: true });
  rmSync(dir, { recursive: true, force: true });
});

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BUNDLE, ...args], { cwd: ROOT, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

const config = writeConfig({
  upstreams: { sim: { simulate: true } },
  models: [{ id: 'acme/chat', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } }],
  storage: { driver: 'sqlite', path: join(dir, 'gateway.db') },
});

describe('CLI: limits beyond the monthly cap', () => {
  it('creates an account and a key with limits, then changes them', async () => {
    const acct = await cli('accounts', 'create', '--config', config, '--id', 'team', '--wallet', '5', '--budget', '2/week');
    expect(acct.code).toBe(0);
    const created = await cli('keys', 'create', '--config', config, '--account', 'team', '--models', 'acme/*,sim/x', '--tpm', '5000', '--budget', '1/day', '--budget', '3.5/month');
    expect(created.stderr).toBe('');
    const { id } = JSON.parse(created.stdout) as { id: string };
    const listed = JSON.parse((await cli('keys', 'list', '--config', config, '--account', 'team')).stdout) as Record<string, unknown>[];
    expect(listed[0]).toMatchObject({ id, models: ['acme/*', 'sim/x'], tokensPerMinute: 5000, budgets: [{ usd: '1', period: 'day' }, { usd: '3.5', period: 'month' }] });

    const changed = await cli('keys', 'limits', '--config', config, '--id', id, '--models', 'all', '--tpm', 'default', '--budget', 'none');
    expect(JSON.parse(changed.stdout)).toMatchObject({ models: null, tokensPerMinute: null, budgets: [] });
    expect((await cli('accounts', 'budgets', '--config', config, '--id', 'team', '--budget', '10/month')).code).toBe(0);
  });

  it('refuses a bad limit flag with one line naming it', async () => {
    const bad = await cli('keys', 'create', '--config', config, '--account', 'team', '--budget', '5/year');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^--budget must be USD\/PERIOD/);
    const tpm = await cli('keys', 'limits', '--config', config, '--id', 'key_x', '--tpm', '-3');
    expect(tpm.code).toBe(1);
    expect(tpm.stderr).toMatch(/^--tpm must be a positive whole number/);
    const none = await cli('accounts', 'budgets', '--config', config, '--id', 'team');
    expect(none.stderr).toMatch(/^missing --budget/);
  });

  it('changes nothing when part of a change is refused, and lists no keys of an account that does not exist', async () => {
    const agent = await cli('keys', 'create', '--config', config, '--account', 'team', '--kind', 'agent', '--model', 'acme/chat', '--monthly-cap', '2');
    expect(agent.stderr).toBe('');
    const { id } = JSON.parse(agent.stdout) as { id: string };
    // An agent key is pinned to its one model: the allow-list is refused, and the cap given
    // with it is not set either.
    const refused = await cli('keys', 'limits', '--config', config, '--id', id, '--monthly-cap', '0.7', '--models', 'acme/*');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/agent key is pinned/);
    const listed = JSON.parse((await cli('keys', 'list', '--config', config, '--account', 'team')).stdout) as Record<string, unknown>[];
    expect(listed.find((k) => k.id === id)).toMatchObject({ monthlyCapUsd: '2' });
    const both = await cli('keys', 'limits', '--config', config, '--id', id, '--monthly-cap', '0.7', '--tpm', '900');
    expect(JSON.parse(both.stdout)).toMatchObject({ monthlyCapUsd: '0.7', tokensPerMinute: 900 });
    const nobody = await cli('keys', 'list', '--config', config, '--account', 'nope');
    expect(nobody.code).toBe(1);
    expect(nobody.stderr).toMatch(/No account "nope"/);
  });
});
