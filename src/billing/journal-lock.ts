/**
 * Ownership of settle journal files, by lock files with a heartbeat: never by PID liveness,
 * since a container's gateway is PID 1 before and after its restart (the previous PID 1 looks
 * alive to its successor), and instances sharing a directory across containers or hosts see
 * each other's PIDs as meaningless numbers.
 *
 * An owner is an id, `s-<16 hex>`. It holds `<id>.lock` (created exclusively) and touches its
 * modification time every heartbeat; its files are `<id>.jsonl` and, while it takes over
 * another owner's file, `<id>~<hex>.jsonl`. A lock not touched for `staleMs` belongs to an
 * owner that is gone (killed, crashed, or released the lock by setting its time to zero at a
 * clean shutdown): its files may be taken. A file is taken by renaming it to the taker's own
 * name, which succeeds for exactly one of several instances trying at once, so no two ever
 * replay the same file together.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

/** An owner's lock, journal file and takeover files. */
const OWNED = /^(s-[0-9a-f]{16})(?:~[0-9a-f]+)?\.jsonl$/;
const LOCK = /^(s-[0-9a-f]{16})\.lock$/;
/** A file of the earlier format, `<pid>-<hex>.jsonl`, owned by PID liveness. */
const LEGACY = /^(\d+)-[0-9a-f]+\.jsonl$/;

/** Milliseconds since `path` was last modified; null when it does not exist. */
function ageOf(path: string, now: number): number | null {
  try {
    return now - statSync(path).mtimeMs;
  } catch {
    return null;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class JournalLock {
  readonly id = `s-${randomBytes(8).toString('hex')}`;
  readonly path: string;

  constructor(private readonly dir: string) {
    this.path = join(dir, `${this.id}.lock`);
    this.create();
  }

  /** For people reading the directory: who held the lock. Ownership is the file's time alone. */
  private create(): void {
    writeFileSync(this.path, `${JSON.stringify({ pid: process.pid, host: hostname(), since: new Date().toISOString() })}\n`, {
      flag: 'wx',
      mode: 0o600,
    });
  }

  /**
   * Touches the lock. Returns false when it was gone (another instance judged this one dead,
   * e.g. after a long stall, and took its file): the lock is then created again, and the
   * caller must write its settles out again so they are on disk under its own lock.
   */
  beat(): boolean {
    const now = new Date();
    try {
      utimesSync(this.path, now, now);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return true;
      this.create();
      return false;
    }
  }

  /**
   * Gives the lock up. With settles left, the lock stays but with its time at zero, so the
   * next instance to look takes them at once instead of after `staleMs`; with none, it goes.
   */
  release(hasSettlesLeft: boolean): void {
    if (!hasSettlesLeft) {
      rmSync(this.path, { force: true });
      return;
    }
    try {
      utimesSync(this.path, 0, 0);
    } catch (err) {
      // Gone already: another instance took the files (released once before, or judged stale).
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  /** A new name of this owner's, to take another owner's file over to. */
  takeoverPath(): string {
    return join(this.dir, `${this.id}~${randomBytes(6).toString('hex')}.jsonl`);
  }
}

/** A journal file whose owner is gone, and the lock to delete once its files are taken. */
export interface Orphan {
  file: string;
  /** The owner's lock (null for the earlier format, which had none). */
  lock: string | null;
}

/**
 * The journal files in `dir` whose owner is gone: a lock not touched for `staleMs` (or, for a
 * file whose lock is missing, the file itself not written for `staleMs`: a live owner creates
 * its lock again within a heartbeat). Files of the earlier `<pid>-<hex>` format are taken when
 * that PID is not running or is this very process's (which never writes that format, so the
 * file is a previous process's that had the same PID). Also deletes stale locks left without
 * files.
 */
export function orphans(dir: string, self: string, staleMs: number): Orphan[] {
  const now = Date.now();
  const stale = (path: string) => {
    const age = ageOf(path, now);
    return age !== null && age > staleMs;
  };
  const names = readdirSync(dir);
  const found: Orphan[] = [];
  const owners = new Set<string>();
  for (const name of names) {
    const file = join(dir, name);
    const owned = OWNED.exec(name);
    if (owned) {
      const owner = owned[1]!;
      owners.add(owner);
      if (owner === self) continue;
      const lock = join(dir, `${owner}.lock`);
      if (ageOf(lock, now) === null ? stale(file) : stale(lock)) found.push({ file, lock });
      continue;
    }
    const legacy = LEGACY.exec(name);
    const pid = Number(legacy?.[1]);
    if (legacy && (pid === process.pid || !pidAlive(pid))) found.push({ file, lock: null });
  }
  for (const name of names) {
    const owner = LOCK.exec(name)?.[1];
    if (owner && owner !== self && !owners.has(owner) && stale(join(dir, name))) {
      rmSync(join(dir, name), { force: true });
      rmSync(join(dir, `${owner}.reserve`), { force: true });
    }
  }
  return found;
}

/**
 * After an owner's files were taken: deletes its lock (if it is still stale: an owner that
 * was only stalled and touched it meanwhile keeps it), its half-written temporary file and
 * the space it reserved.
 */
export function forget(orphan: Orphan, staleMs: number): void {
  if (orphan.lock === null) return;
  const age = ageOf(orphan.lock, Date.now());
  if (age === null || age <= staleMs) return;
  rmSync(orphan.lock, { force: true });
  const owner = orphan.lock.slice(0, -'.lock'.length);
  rmSync(`${owner}.jsonl.tmp`, { force: true });
  rmSync(`${owner}.reserve`, { force: true });
}
