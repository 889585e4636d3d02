/**
 * A full disk must not lose charges the client saw. The store refuses the settle (it is
 * unreachable) and the settle journal's disk is full (a 256 KiB tmpfs the test mounts and
 * fills, so the journal meets a real ENOSPC): the charge would live only in memory, so the
 * call fails instead, a plain call with 503 service_unavailable and a stream with an error
 * event in place of its last frames, and the journal never writes those charges later. Once
 * the disk has room, a call whose settle the store refuses is journaled and answered as usual.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { MODEL, type RunningGateway, postChat, startGateway, testConfig } from '../helpers/gateway.js';

const mountPoint = mkdtempSync(join(tmpdir(), 'mg-full-'));
const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', mountPoint], { stdio: 'ignore' }).status === 0;
if (!mounted) console.warn('\n!!! SKIPPING the disk-full settle test: mounting a tmpfs is not allowed here.\n');

/** Fills the volume: a file as large as it takes (the last write meets ENOSPC). */
function fillDisk(): void {
  for (let size = 1 << 20; size >= 1; size >>= 1) {
    try {
      writeFileSync(join(mountPoint, `fill-${size}`), Buffer.alloc(size), { flag: 'wx' });
    } catch {
      // Too large for what is left: try half.
    }
  }
}

let gw: RunningGateway;
let devKey: string;
const body = (stream: boolean) => ({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 20, stream });

describe.runIf(mounted)('settles when the store and the journal both fail', () => {
  beforeAll(async () => {
    const stores = createMemoryStores();
    const setup = testConfig();
    devKey = setup.devKey;
    gw = await startGateway({ ...setup.options, stores, settleJournalDir: join(mountPoint, 'journal') });
    // The store is unreachable for settles (holds still work: the call runs to its end).
    stores.billing.settle = async () => {
      throw new StoreUnavailableError('settle failed: the store is unreachable');
    };
  });

  afterAll(async () => {
    await gw?.close();
    spawnSync('umount', [mountPoint]);
    rmSync(mountPoint, { recursive: true, force: true });
  });

  it('disk full: a plain call gets 503, a stream ends with an error event, not its last frames', async () => {
    fillDisk();
    const plain = await postChat(gw.baseURL, devKey, body(false));
    const answer = (await plain.json()) as { error?: { code: string } };
    expect(plain.status).toBe(503);
    expect(answer.error?.code).toBe('service_unavailable');

    const streamed = await postChat(gw.baseURL, devKey, body(true));
    const text = await streamed.text();
    // The answer's last frames (finish_reason "stop", usage) are withheld; the error event ends it.
    expect(text).toMatch(/"error":\{[^}]*"code":"service_unavailable"/);
    expect(text).not.toMatch(/"finish_reason":"stop"/);
  });

  it('room again: the settle is journaled and the call answered', async () => {
    for (let size = 1 << 20; size >= 1; size >>= 1) rmSync(join(mountPoint, `fill-${size}`), { force: true });
    const plain = await postChat(gw.baseURL, devKey, body(false));
    expect(plain.status).toBe(200);
    // The journal holds that one settle: none of the calls that failed (their charges were
    // given up) is written later, to be charged for an answer the client never had.
    const dir = join(mountPoint, 'journal');
    const lines = readdirSync(dir)
      .filter((f) => f.endsWith('.jsonl'))
      .flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n').filter(Boolean));
    expect(lines).toHaveLength(1);
  });
});
