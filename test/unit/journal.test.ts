import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { fileJournal } from '../../src/billing/journal.js';
import type { SettleRequest } from '../../src/stores/types.js';

const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'mg-journal-unit-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function settle(holdId: string, cost: bigint): SettleRequest {
  return {
    holdId,
    accountId: 'acct',
    month: '2026-11',
    cost,
    entry: { id: holdId, accountId: 'acct', keyId: 'key', model: 'm', units: { kind: 'tokens', prompt: 1, completion: 2 }, measured: 'usage', at: 5 },
  };
}

/** The pid of a process that has exited (so its journal file is an orphan). */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
  return Number(r.stdout.toString());
}

describe('settle journal', () => {
  it('keeps exact amounts on disk, and removes its file once every settle landed', () => {
    const dir = tempDir();
    const j = fileJournal(dir);
    const big = 9_007_199_254_740_991n;
    j.add(settle('h1', big));
    j.add(settle('h2', 7n));
    j.add(settle('h2', 7n)); // the same settle twice is kept once
    const files = readdirSync(dir).filter((f) => f.endsWith('.jsonl'));
    expect(files).toHaveLength(1);
    const lines = readFileSync(join(dir, files[0]!), 'utf8').trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(JSON.parse(lines[0]!).cost).toBe('9007199254740991');
    j.remove(settle('h1', big));
    expect(j.entries().map((e) => e.holdId)).toEqual(['h2']);
    j.remove(settle('h2', 7n));
    expect(readdirSync(dir)).toEqual([]);
  });

  it('takes over the files of processes that are gone, and leaves those of live ones', () => {
    const dir = tempDir();
    const orphan = `${deadPid()}-abcd1234.jsonl`;
    const req = settle('lost', 123n);
    writeFileSync(join(dir, orphan), `${JSON.stringify({ ...req, cost: '123' })}\nnot json\n`);
    // This very process is alive: its other file (another gateway in the same process) stays.
    const live = `${process.pid}-ffff0000.jsonl`;
    writeFileSync(join(dir, live), `${JSON.stringify({ ...settle('mine', 1n), cost: '1' })}\n`);

    const j = fileJournal(dir);
    expect(j.entries()).toEqual([req]);
    const names = readdirSync(dir);
    expect(names).not.toContain(orphan);
    expect(names).toContain(live);
    expect(names.filter((n) => n.endsWith('.jsonl'))).toHaveLength(2);
  });
});
