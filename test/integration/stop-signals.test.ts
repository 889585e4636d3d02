/**
 * SIGHUP (a closed terminal or SSH session, a supervisor's reload) drains the CLI like
 * SIGTERM: a stream in flight finishes to [DONE] with no error event, the process exits 0,
 * the stream is charged and no hold is left. With `--workers 2` too, whether the hangup
 * reaches the primary alone or every process (as a terminal's does, to its process group).
 * A signal repeated during the drain does not cut it: systemd's default stop sends SIGTERM
 * to every process of the unit, so each worker gets it from systemd and from its primary.
 * Over SQLite, through the real CLI.
 */
import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMPLETION_PRICE, PROMPT_PRICE, eventually, testKey } from '../helpers/gateway.js';
import { runCli, startGatewayProcess, tokenChargesOf, writeConfig } from '../helpers/processes.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const MODEL = 'test/chat';
const ACCOUNT = 'acct_hup';

let up: TestUpstream;
beforeAll(async () => {
  up = await startTestUpstream();
});
afterAll(() => up.close());

/** Serves over SQLite, streams one call, sends SIGHUP mid-stream as `hangUp` says, then checks the books. */
async function hangUpMidStream(args: string[], hangUp: (pids: number[]) => void): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mg-sighup-'));
  const key = testKey();
  const file = writeConfig({
    upstreams: { test: { baseUrl: up.url, apiKey: 'upstream-key', timeoutMs: 20_000 } },
    models: [{ id: MODEL, upstream: 'test', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE } }],
    accounts: [{ id: ACCOUNT, walletUsd: 100 }],
    keys: [{ key, account: ACCOUNT }],
    storage: { driver: 'sqlite', path: join(dir, 'books.db') },
    settleJournalDir: join(dir, 'journal'),
    shutdownGraceMs: 20_000,
  });
  const gw = await startGatewayProcess(file, {}, [], { args, startMs: 150_000 });
  try {
    const workers = /worker processes on one port \(pids ([\d, ]+)\)/.exec(gw.output())?.[1]?.split(', ').map(Number) ?? [];
    up.setBehavior({ kind: 'stream', chunks: Array.from({ length: 8 }, (_, i) => `c${i} `), delayMs: 150, usageCounts: { prompt_tokens: 20, completion_tokens: 8 } });
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hang up' }], stream: true }),
    });
    expect(res.status).toBe(200);
    const body = res.text();
    await eventually(() => (up.requests.at(-1)?.chunksSent ?? 0) >= 2, 'the stream to start');
    const exited = new Promise<number | null>((r) => gw.child.once('exit', (code) => r(code)));
    hangUp([gw.child.pid!, ...workers]);
    const text = await body;
    expect(text.trimEnd().endsWith('data: [DONE]'), text).toBe(true);
    expect(text).not.toContain('"error"');
    expect(await exited, gw.output()).toBe(0);

    const charges = await tokenChargesOf(file, ACCOUNT);
    expect(charges).toHaveLength(1);
    expect(Number(charges[0]!.cost_usd)).toBeGreaterThan(0);
    const wallet = await runCli(['wallet', 'show', '--config', file, '--account', ACCOUNT]);
    expect(JSON.parse(wallet.stdout)).toMatchObject({ heldUsd: '0' });
  } finally {
    await gw.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
}

describe('SIGHUP drains like SIGTERM', () => {
  it('serve: the stream in flight finishes and is charged, exit 0', async () => {
    await hangUpMidStream([], ([pid]) => process.kill(pid!, 'SIGHUP'));
  }, 120_000);

  it('serve --workers 2, SIGHUP to the primary: the same', async () => {
    await hangUpMidStream(['--workers', '2'], ([primary]) => process.kill(primary!, 'SIGHUP'));
  }, 300_000);

  it('serve --workers 2, SIGHUP to every process (a terminal hangup): the same', async () => {
    await hangUpMidStream(['--workers', '2'], (pids) => {
      expect(pids).toHaveLength(3);
      for (const pid of pids) process.kill(pid, 'SIGHUP');
    });
  }, 300_000);
});

describe('a stop signal repeated during the drain does not cut it', () => {
  it('serve, SIGTERM twice: the stream finishes and is charged, exit 0', async () => {
    await hangUpMidStream([], ([pid]) => {
      process.kill(pid!, 'SIGTERM');
      setTimeout(() => process.kill(pid!, 'SIGTERM'), 200);
    });
  }, 120_000);

  it('serve, SIGINT twice: the same', async () => {
    await hangUpMidStream([], ([pid]) => {
      process.kill(pid!, 'SIGINT');
      setTimeout(() => process.kill(pid!, 'SIGINT'), 200);
    });
  }, 120_000);

  it('serve --workers 2, SIGTERM to every process (systemd stopping the unit): the same', async () => {
    await hangUpMidStream(['--workers', '2'], (pids) => {
      expect(pids).toHaveLength(3);
      for (const pid of pids) process.kill(pid, 'SIGTERM');
      // The primary, told twice, must not leave its workers draining on their own.
      setTimeout(() => process.kill(pids[0]!, 'SIGTERM'), 200);
    });
  }, 300_000);
});
