/**
 * The settle journal: settles that could not be written to the store when their call ended
 * (the store was unreachable) are kept on local disk until they land, so a charge for
 * delivered output survives the store's outage and this process's restart alike.
 *
 * A journal file holds one JSON settle request per line and is rewritten whole (to a temporary file,
 * flushed, then renamed over the old one) whenever the set of unlanded settles changes, so a
 * crash at any moment leaves either the old or the new set, never a torn line. It changes only
 * while the store is failing, so the rewrite costs nothing on the ordinary path. Replaying an
 * entry is safe: a settle is idempotent per hold id in every store.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { SettleRequest } from '../stores/types.js';

export interface SettleJournal {
  /** Records a settle that has not landed; on disk before this returns. */
  add(req: SettleRequest): void;
  /** Forgets a settle that landed (or that the store refused as already closed). */
  remove(req: SettleRequest): void;
  /** The unlanded settles, including those an earlier process left behind. */
  entries(): SettleRequest[];
}

const idOf = (req: SettleRequest) => `${req.accountId}\u0000${req.holdId}`;

function encode(req: SettleRequest): string {
  return JSON.stringify({ ...req, cost: req.cost.toString() });
}

function decode(line: string): SettleRequest | null {
  try {
    const raw = JSON.parse(line) as Omit<SettleRequest, 'cost'> & { cost: string };
    if (typeof raw.holdId !== 'string' || typeof raw.accountId !== 'string' || !/^\d+$/.test(raw.cost)) return null;
    return { ...raw, cost: BigInt(raw.cost) };
  } catch {
    return null;
  }
}

/** A journal kept in memory only: for stores that are themselves lost with the process. */
export function memoryJournal(): SettleJournal {
  const pending = new Map<string, SettleRequest>();
  return {
    add: (req) => void pending.set(idOf(req), req),
    remove: (req) => void pending.delete(idOf(req)),
    entries: () => [...pending.values()],
  };
}

const FILE = /^(\d+)-[0-9a-f]+\.jsonl$/;

function alive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * A journal in the directory `dir` (created when missing). Each process writes its own file,
 * `<pid>-<random>.jsonl`, so several instances started from one directory never write over
 * each other. At start a process takes over the files of processes no longer running (a
 * crash, a kill -9): their settles become its own and are replayed.
 */
export function fileJournal(dir: string): SettleJournal {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${process.pid}-${randomBytes(4).toString('hex')}.jsonl`);
  const pending = new Map<string, SettleRequest>();
  const adopted: string[] = [];
  for (const name of readdirSync(dir)) {
    const m = FILE.exec(name);
    if (!m || alive(Number(m[1]))) continue;
    let text = '';
    try {
      text = readFileSync(join(dir, name), 'utf8');
    } catch {
      continue; // taken over by another instance meanwhile
    }
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      const req = decode(line);
      if (req) pending.set(idOf(req), req);
    }
    adopted.push(join(dir, name));
  }

  const write = () => {
    if (pending.size === 0) {
      rmSync(path, { force: true });
      return;
    }
    const tmp = `${path}.tmp`;
    const fd = openSync(tmp, 'w', 0o600);
    try {
      writeSync(fd, [...pending.values()].map(encode).join('\n') + '\n');
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  };
  // The adopted settles are in this process's file before the dead processes' files go.
  if (pending.size) write();
  for (const file of adopted) rmSync(file, { force: true });

  return {
    add(req) {
      pending.set(idOf(req), req);
      write();
    },
    remove(req) {
      if (pending.delete(idOf(req))) write();
    },
    entries: () => [...pending.values()],
  };
}
