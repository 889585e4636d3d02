/**
 * A full disk must not lose charges the client saw. The store refuses settles (it is
 * unreachable) and the settle journal's disk fills up (a 256 KiB tmpfs the test mounts and
 * fills, so the journal meets a real ENOSPC):
 * - the journal reserved space at start: the first settle after the disk filled still goes
 *   to the journal (it frees its reserve), and the call is answered;
 * - with the reserve used and the disk full again, settles still go into the room left in the
 *   journal file's last block (it is appended to); once that is used up, the charge would live
 *   only in memory, so the call fails instead: a plain call with 503 service_unavailable, a
 *   stream with an error event in place of its last frames, and the journal never writes
 *   those charges later (a line a failed write left torn is mended by the next change);
 * - once the disk has room, a refused settle is journaled and the call answered as usual.
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
let fills = 0;
function fillDisk(): void {
  fills++;
  for (let size = 1 << 20; size >= 1; size >>= 1) {
    try {
      writeFileSync(join(mountPoint, `fill-${fills}-${size}`), Buffer.alloc(size), { flag: 'wx' });
    } catch {
      // Too large for what is left: try half.
    }
  }
}

let gw: RunningGateway;
let devKey: string;
/** Calls answered (their settles journaled) after the disk filled, beyond the first. */
let answeredWhenFull = 0;
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

  const journalDir = () => join(mountPoint, 'journal');
  // The settles journaled (a file's first line names its store).
  const journaled = () =>
    readdirSync(journalDir())
      .filter((f) => f.endsWith('.jsonl'))
      .flatMap((f) => readFileSync(join(journalDir(), f), 'utf8').split('\n').filter((line) => line && !line.startsWith('{"store":')));

  it('the disk fills up: the space the journal reserved at start takes the settle', async () => {
    fillDisk();
    const plain = await postChat(gw.baseURL, devKey, body(false));
    expect(plain.status).toBe(200);
    expect(journaled()).toHaveLength(1);
    // The journal wrote it by giving up its reserve.
    expect(readdirSync(journalDir()).some((f) => f.endsWith('.reserve'))).toBe(false);
  });

  it('reserve used and disk full: a plain call gets 503, a stream ends with an error event, not its last frames', async () => {
    fillDisk();
    // The room left in the journal file's last block takes a few settles more (each answered
    // and journaled); a block's worth at most.
    let answer: { error?: { code: string } } = {};
    let status = 200;
    for (let i = 0; i < 40 && status === 200; i++) {
      const plain = await postChat(gw.baseURL, devKey, body(false));
      status = plain.status;
      answer = (await plain.json()) as { error?: { code: string } };
      if (status === 200) answeredWhenFull++;
    }
    expect(status).toBe(503);
    expect(answer.error?.code).toBe('service_unavailable');

    let text = '';
    for (let i = 0; i < 40; i++) {
      text = await (await postChat(gw.baseURL, devKey, body(true))).text();
      if (text.includes('"error"')) break;
      answeredWhenFull++;
    }
    // The answer's last frames (finish_reason "stop", usage) are withheld; the error event ends it.
    expect(text).toMatch(/"error":\{[^}]*"code":"service_unavailable"/);
    expect(text).not.toMatch(/"finish_reason":"stop"/);
  });

  it('room again: the settle is journaled and the call answered', async () => {
    for (const f of readdirSync(mountPoint)) if (f.startsWith('fill-')) rmSync(join(mountPoint, f), { force: true });
    const plain = await postChat(gw.baseURL, devKey, body(false));
    expect(plain.status).toBe(200);
    // The journal holds every answered call's settle: none of the calls that failed (their
    // charges were given up) is written later, to be charged for an answer never delivered.
    expect(journaled()).toHaveLength(2 + answeredWhenFull);
    for (const line of journaled()) expect(() => JSON.parse(line)).not.toThrow();
  });
});
