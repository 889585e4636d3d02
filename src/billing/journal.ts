/**
 * The settle journal: settles that could not be written to the store when their call ended
 * (the store was unreachable) are kept on local disk until they land, so a charge for
 * delivered output survives the store's outage and this process's restart alike.
 *
 * The file holds one JSON settle request per line and is rewritten whole (to a temporary file,
 * flushed, then renamed over the old one) whenever the set of unlanded settles changes, so a
 * crash at any moment leaves either the old or the new set, never a torn line. It changes only
 * while the store is failing, so the rewrite costs nothing on the ordinary path. Replaying an
 * entry is safe: a settle is idempotent per hold id in every store.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
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

/** A journal in the file at `path` (its directory is created when missing). */
export function fileJournal(path: string): SettleJournal {
  const pending = new Map<string, SettleRequest>();
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const req = decode(line);
    if (req) pending.set(idOf(req), req);
  }

  const write = () => {
    if (pending.size === 0) {
      rmSync(path, { force: true });
      return;
    }
    mkdirSync(dirname(path), { recursive: true });
    const tmp = `${path}.${process.pid}.tmp`;
    const fd = openSync(tmp, 'w', 0o600);
    try {
      writeSync(fd, [...pending.values()].map(encode).join('\n') + '\n');
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  };

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
