import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { fileJournal, type SettleJournal } from '../../src/billing/journal.js';
import type { SettleRequest } from '../../src/stores/types.js';
import { settleRequest } from '../helpers/billing.js';

const dirs: string[] = [];
const journals: SettleJournal[] = [];
/** A journal with a fast heartbeat: stale after 300 ms without one. */
const fast = (dir: string) => {
  const j = fileJournal(dir, { heartbeatMs: 50, staleMs: 300 });
  journals.push(j);
  return j;
};
const jsonl = (dir: string) => readdirSync(dir).filter((n) => n.endsWith('.jsonl'));
const line = (req: SettleRequest) => `${JSON.stringify({ ...req, cost: req.cost.toString() })}\n`;
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'mg-journal-unit-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const j of journals.splice(0)) j.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});


/** The pid of a process that has exited (so its journal file is an orphan). */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
  return Number(r.stdout.toString());
}

describe('settle journal', () => {
  it('keeps exact amounts on disk, and removes its file once every settle landed', () => {
    const dir = tempDir();
    const j = fast(dir);
    const big = 9_007_199_254_740_991n;
    j.add(settleRequest('h1', big));
    j.add(settleRequest('h2', 7n));
    j.add(settleRequest('h2', 7n)); // the same settle twice is kept once
    const files = jsonl(dir);
    expect(files).toHaveLength(1);
    const lines = readFileSync(join(dir, files[0]!), 'utf8').trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(JSON.parse(lines[0]!).cost).toBe('9007199254740991');
    j.remove(settleRequest('h1', big));
    expect(j.entries().map((e) => e.holdId)).toEqual(['h2']);
    j.remove(settleRequest('h2', 7n));
    expect(jsonl(dir)).toEqual([]);
    j.close();
    expect(readdirSync(dir)).toEqual([]); // nothing left to take: the lock goes too
  });


  it('replays a journal written by an earlier process with this very PID once its lock is stale (PID 1 in a container)', () => {
    const dir = tempDir();
    // What a gateway with this PID wrote before it was killed with -9: its file, and its lock,
    // no longer touched (aged past the stale time), naming this same PID.
    const owner = 's-0123456789abcdef';
    const req = settleRequest('pid-reused', 123n);
    writeFileSync(join(dir, `${owner}.jsonl`), `${line(req)}not json\n`);
    writeFileSync(join(dir, `${owner}.lock`), JSON.stringify({ pid: process.pid }));
    const past = new Date(Date.now() - 60_000);
    utimesSync(join(dir, `${owner}.lock`), past, past);
    // And a file of the earlier format (owned by PID liveness) that this same PID left.
    const legacy = settleRequest('legacy-same-pid', 5n);
    writeFileSync(join(dir, `${process.pid}-ffff0000.jsonl`), line(legacy));

    const j = fast(dir);
    expect(j.entries().map((e) => e.holdId).sort()).toEqual(['legacy-same-pid', 'pid-reused']);
    expect(j.entries().find((e) => e.holdId === 'pid-reused')).toEqual(req);
    // Taken into the new journal's own file; the dead owner's file and lock are gone.
    const names = readdirSync(dir);
    expect(names).not.toContain(`${owner}.jsonl`);
    expect(names).not.toContain(`${owner}.lock`);
    expect(names).not.toContain(`${process.pid}-ffff0000.jsonl`);
    expect(jsonl(dir)).toHaveLength(1);
    expect(readFileSync(join(dir, jsonl(dir)[0]!), 'utf8').trim().split('\n')).toHaveLength(2);
  });

  it('takes the earlier format of a process that is gone, and leaves one whose process runs', () => {
    const dir = tempDir();
    const gone = `${deadPid()}-abcd1234.jsonl`;
    writeFileSync(join(dir, gone), line(settleRequest('lost', 1n)));
    const running = `${process.ppid}-abcd1234.jsonl`; // a live process other than this one
    writeFileSync(join(dir, running), line(settleRequest('other', 2n)));
    const j = fast(dir);
    expect(j.entries().map((e) => e.holdId)).toEqual(['lost']);
    expect(readdirSync(dir)).toContain(running);
  });

  it("never takes a live owner's file, even in the same process; takes it at once when released with settles left", async () => {
    const dir = tempDir();
    const a = fast(dir);
    a.add(settleRequest('a-owns', 9n));
    await sleep(600); // two stale periods: the heartbeat keeps the lock fresh
    const b = fast(dir);
    const taken: string[] = [];
    b.onTakeOver((reqs) => taken.push(...reqs.map((e) => e.holdId)));
    expect(b.entries()).toEqual([]);
    await sleep(600);
    expect(taken).toEqual([]);
    expect(a.entries().map((e) => e.holdId)).toEqual(['a-owns']);
    expect(jsonl(dir)).toHaveLength(1);
    // A clean shutdown with a settle unlanded: the next journal to look takes it, no stale wait.
    a.close();
    await sleep(150);
    expect(taken).toEqual(['a-owns']);
    expect(b.entries().map((e) => e.holdId)).toEqual(['a-owns']);
  });

  it('takes over, while running, the file of an owner that stopped beating (killed), and tells its listener', async () => {
    const dir = tempDir();
    const owner = 's-fedcba9876543210';
    writeFileSync(join(dir, `${owner}.jsonl`), line(settleRequest('killed', 4n)));
    writeFileSync(join(dir, `${owner}.lock`), '{}'); // fresh: killed a moment ago
    const j = fast(dir);
    const taken: string[] = [];
    j.onTakeOver((reqs) => taken.push(...reqs.map((e) => e.holdId)));
    expect(j.entries()).toEqual([]); // its lock may still be held
    await sleep(500);
    expect(taken).toEqual(['killed']);
    expect(readdirSync(dir)).not.toContain(`${owner}.lock`);
  });

  it("takes over an earlier folder's settles (adopt) once their owner is gone, never a live owner's", async () => {
    const old = tempDir();
    const dir = join(tempDir(), 'new');
    const earlier = fast(old);
    earlier.add(settleRequest('from-the-old-folder', 7n));
    const j = fileJournal(dir, { heartbeatMs: 50, staleMs: 300, adopt: [old, join(old, 'missing')] });
    journals.push(j);
    expect(j.entries()).toEqual([]); // its owner still beats
    earlier.close(); // gone, with the settle unlanded
    await sleep(200);
    expect(j.entries().map((e) => e.holdId)).toEqual(['from-the-old-folder']);
    expect(jsonl(old)).toEqual([]);
    expect(readFileSync(join(dir, jsonl(dir)[0]!), 'utf8')).toContain('from-the-old-folder');
  });

  it('an orphan is taken by exactly one of several instances starting at once', async () => {
    const dir = tempDir();
    const owner = 's-00000000000000aa';
    writeFileSync(join(dir, `${owner}.jsonl`), line(settleRequest('once', 3n)));
    writeFileSync(join(dir, `${owner}.lock`), '{}');
    const past = new Date(Date.now() - 60_000);
    utimesSync(join(dir, `${owner}.lock`), past, past);
    const script = `import { fileJournal } from ${JSON.stringify(join(import.meta.dirname, '../../src/billing/journal.ts'))};
      const j = fileJournal(${JSON.stringify(dir)}); process.stdout.write(String(j.entries().length));`;
    const runs = Array.from(
      { length: 6 },
      () =>
        new Promise<string>((resolve) => {
          const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
          let out = '';
          child.stdout.on('data', (d: Buffer) => (out += d.toString()));
          child.once('exit', () => resolve(out));
        }),
    );
    const counts = await Promise.all(runs);
    expect(counts.map(Number).sort()).toEqual([0, 0, 0, 0, 0, 1]);
    // The winner exited without landing it: its file holds the settle once, for the next owner.
    const left = jsonl(dir).flatMap((n) => readFileSync(join(dir, n), 'utf8').trim().split('\n'));
    expect(left.map((l) => JSON.parse(l).holdId)).toEqual(['once']);
  });
});

describe('settle journal: appended, compacted', () => {
  it('a kept settle is appended (the file is not rewritten); landed ones stay until the file is mostly landed ones', () => {
    const dir = tempDir();
    const j = fast(dir);
    j.add(settleRequest('a0', 1n));
    const file = join(dir, jsonl(dir)[0]!);
    const inode = statSync(file).ino;
    for (let i = 1; i < 200; i++) j.add(settleRequest(`a${i}`, 1n));
    // Appended to one file: the same inode, one line per settle.
    expect(statSync(file).ino).toBe(inode);
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(200);
    // Landing a few leaves their lines (a replay of a landed settle is idempotent)...
    for (let i = 0; i < 10; i++) j.remove(settleRequest(`a${i}`, 1n));
    expect(statSync(file).ino).toBe(inode);
    expect(j.entries()).toHaveLength(190);
    // ...until the file holds more than twice the unlanded ones (plus a little): then it is compacted.
    for (let i = 10; i < 150; i++) j.remove(settleRequest(`a${i}`, 1n));
    const left = readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l).holdId as string);
    expect(left.length).toBeLessThanOrEqual(2 * 50 + 64);
    expect(left).toEqual(expect.arrayContaining(Array.from({ length: 50 }, (_, i) => `a${150 + i}`)));
    for (let i = 150; i < 200; i++) j.remove(settleRequest(`a${i}`, 1n));
    expect(jsonl(dir)).toEqual([]);
  });

  it("a file with landed settles in it, taken over by another journal: every unlanded one is among what it replays", () => {
    const dir = tempDir();
    const first = fileJournal(dir, { heartbeatMs: 50, staleMs: 300 });
    for (let i = 0; i < 5; i++) first.add(settleRequest(`b${i}`, BigInt(i + 1)));
    first.remove(settleRequest('b0', 1n));
    first.remove(settleRequest('b3', 4n));
    // Released with settles left: the next journal takes the file at once.
    first.close();
    const next = fast(dir);
    const ids = next.entries().map((e) => e.holdId);
    expect(ids).toEqual(expect.arrayContaining(['b1', 'b2', 'b4']));
    // The landed ones may come too: a settle is idempotent per hold id in every store.
    expect(ids.every((id) => /^b[0-4]$/.test(id))).toBe(true);
  });

  it('a settle kept already, added again unchanged (a replay that failed again), writes nothing', () => {
    const dir = tempDir();
    const j = fast(dir);
    for (let i = 0; i < 3; i++) j.add(settleRequest(`c${i}`, 1n));
    const file = join(dir, jsonl(dir)[0]!);
    const before = { ino: statSync(file).ino, text: readFileSync(file, 'utf8') };
    for (let i = 0; i < 3; i++) j.add(settleRequest(`c${i}`, 1n));
    expect(statSync(file).ino).toBe(before.ino);
    expect(readFileSync(file, 'utf8')).toBe(before.text);
    // Changed, it is written (the whole file, the settle once).
    j.add(settleRequest('c1', 2n));
    const lines = readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { holdId: string; cost: string });
    expect(lines.filter((l) => l.holdId === 'c1')).toEqual([expect.objectContaining({ cost: '2' })]);
  });
});
