/**
 * The settle journal: settles that could not be written to the store when their call ended
 * (the store was unreachable) are kept on local disk until they land, so a charge for
 * delivered output survives the store's outage and this process's restart alike. Each
 * journal owns its files through a lock with a heartbeat (journal-lock.ts), never through
 * its PID, and takes over the files of owners that are gone, at start and while it runs.
 *
 * A journal file holds one JSON settle request per line. A settle kept is appended (and flushed
 * before `add` returns); one that landed is dropped from memory only, and stays in the file until
 * the file is compacted (rewritten whole to a temporary file, flushed, renamed over the old one)
 * once it holds more than twice the unlanded settles, or removed once none is left. So keeping
 * and landing n settles during an outage costs O(n) writes, not O(n^2) (a whole rewrite per
 * change stalled the event loop for seconds with a few thousand). Replaying a settle that
 * landed is safe: a settle is idempotent per hold id in every store. A write that failed part
 * way (a full disk) may leave a torn last line: the next change rewrites the file whole.
 */
import { closeSync, existsSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readFileSync, readSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { SettleRequest } from '../stores/types.js';
import { forget, JournalLock, orphans } from './journal-lock.js';

export interface SettleJournal {
  /** Records a settle that has not landed; on disk before this returns. */
  add(req: SettleRequest): void;
  /** Forgets a settle that landed (or that the store refused as already closed). */
  remove(req: SettleRequest): void;
  /** The unlanded settles, including those an earlier process left behind. */
  entries(): SettleRequest[];
  /** Calls `listener` with the settles taken over later, from owners found gone meanwhile. */
  onTakeOver(listener: (taken: SettleRequest[]) => void): void;
  /** Stops the heartbeat and gives up the files: unlanded settles stay on disk for the next owner. */
  close(): void;
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
    onTakeOver: () => undefined,
    close: () => undefined,
  };
}

/** How often a journal touches its lock and looks for files of owners that are gone. */
const HEARTBEAT_MS = 2_000;
/**
 * A lock not touched for this long belongs to an owner that is gone. Five heartbeats: an
 * event loop stalled that long makes a live owner look gone, which costs only a replay twice
 * (settles are idempotent per hold id), never a lost settle: both keep it until it lands.
 */
const STALE_MS = 10_000;

/**
 * Space each journal keeps for itself: a file of this size written at start (`<owner>.reserve`).
 * A disk that fills up during a store outage then still takes the settles: the journal frees
 * the reserve and writes on. 64 KiB holds a hundred or so settles.
 */
const RESERVE_BYTES = 64 * 1024;

const isDiskFull = (err: unknown) => (err as { code?: unknown })?.code === 'ENOSPC';

/** Landed settles a file may hold beyond twice its unlanded ones before it is compacted. */
const COMPACT_SLACK = 64;

/** Writes all of `text` (a write to a full disk may take part of it: that is a failure). */
function writeAll(fd: number, text: string): void {
  const bytes = Buffer.from(text);
  const n = writeSync(fd, bytes);
  if (n !== bytes.length) throw Object.assign(new Error(`wrote ${n} of ${bytes.length} bytes`), { code: 'ENOSPC' });
}

export interface FileJournalOptions {
  heartbeatMs?: number;
  staleMs?: number;
  /**
   * Further folders of journals of the same store (an earlier folder name): the files of their
   * owners that are gone are taken over too, by the same rules, so no unlanded settle is left
   * behind when the folder a store's journal lives in changes.
   */
  adopt?: readonly string[];
  /**
   * The identity of the store the settles go to (`Stores.identity`). Each file names it in its
   * first line, and only files of this store (or naming none: an earlier version's, or a store
   * without an identity) are taken over: gateways of other stores may share the folder, and a
   * charge replayed into another store's books would bill another tenant.
   */
  store?: string;
}

/** The first line of a journal file that names its store. */
const headerOf = (store: string) => JSON.stringify({ store });

/** Whether the file at `file` may be taken by a journal of `store`: it names that store, or none. */
function ofStore(file: string, store: string | undefined): boolean {
  if (store === undefined) return true;
  let first: string;
  try {
    // Only the first line: a file of another store stays an orphan here, looked at every heartbeat.
    const fd = openSync(file, 'r');
    try {
      const head = Buffer.alloc(512);
      const text = head.subarray(0, readSync(fd, head, 0, head.length, 0)).toString('utf8');
      const nl = text.indexOf('\n');
      first = nl === -1 ? text : text.slice(0, nl);
    } finally {
      closeSync(fd);
    }
  } catch {
    return true; // taken and read by the usual rules, which skip what cannot be read
  }
  try {
    const named = (JSON.parse(first) as { store?: unknown } | null)?.store;
    return typeof named !== 'string' || named === store;
  } catch {
    return true;
  }
}

/** Reads a taken file's settles; unreadable lines (a torn write of the earlier format) are skipped. */
function readSettles(file: string): SettleRequest[] {
  const out: SettleRequest[] = [];
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const req = line.trim() ? decode(line) : null;
    if (req) out.push(req);
  }
  return out;
}

/**
 * A journal in the directory `dir` (created when missing), shared safely by any number of
 * instances, on one host or several. Each writes only its own file, `<owner id>.jsonl`, under
 * its own lock. At start, and every heartbeat after, it takes over the files of owners that
 * are gone (a crash, a kill -9, a clean shutdown that left settles unlanded): their settles
 * become its own, to replay. A taken file is first renamed to the taker's name (one taker wins),
 * then merged into the taker's file, then deleted, so a crash at any step leaves every settle
 * in some owned file.
 */
export function fileJournal(dir: string, options: FileJournalOptions = {}): SettleJournal {
  const heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
  const staleMs = options.staleMs ?? STALE_MS;
  const adopt = options.adopt ?? [];
  const head = options.store === undefined ? '' : `${headerOf(options.store)}\n`;
  mkdirSync(dir, { recursive: true });
  const lock = new JournalLock(dir);
  const path = join(dir, `${lock.id}.jsonl`);
  const pending = new Map<string, SettleRequest>();
  const reservePath = join(dir, `${lock.id}.reserve`);
  /** Reserves the space (best effort: a disk already full keeps none, and says so by ENOSPC later). */
  const reserve = () => {
    if (existsSync(reservePath)) return;
    try {
      writeFileSync(reservePath, Buffer.alloc(RESERVE_BYTES, 0x20), { mode: 0o600 });
    } catch {
      rmSync(reservePath, { force: true });
    }
  };

  /** Lines in this journal's file: the unlanded settles, and landed ones until the next compaction. */
  let lines = 0;
  /** The file may end in a torn line (a write failed part way): the next change rewrites it whole. */
  let torn = false;

  const rewrite = () => {
    const tmp = `${path}.tmp`;
    try {
      const fd = openSync(tmp, 'w', 0o600);
      try {
        writeAll(fd, head + [...pending.values()].map(encode).join('\n') + '\n');
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, path);
    } catch (err) {
      rmSync(tmp, { force: true });
      throw err;
    }
    lines = pending.size;
    torn = false;
  };

  /** The file rewritten whole from the unlanded settles (removed when none is left). */
  const write = () => {
    if (pending.size === 0) {
      rmSync(path, { force: true });
      lines = 0;
      torn = false;
      // Nothing kept: the space used up by a full disk is reserved again, if there is room.
      reserve();
      return;
    }
    try {
      rewrite();
    } catch (err) {
      if (!isDiskFull(err) || !existsSync(reservePath)) throw err;
      // The disk is full: the reserved space goes to the settles.
      rmSync(reservePath, { force: true });
      rewrite();
    }
  };

  /**
   * One settle (already in `pending`) on disk: appended and flushed; when that fails (a full
   * disk, maybe part way), the file is rewritten whole instead, with the reserve if need be.
   */
  const append = (req: SettleRequest) => {
    if (!torn) {
      let fd: number | null = null;
      let size = -1;
      try {
        fd = openSync(path, 'a', 0o600);
        size = fstatSync(fd).size;
        writeAll(fd, `${size === 0 ? head : ''}${encode(req)}\n`);
        fsyncSync(fd);
        lines++;
        return;
      } catch {
        // What the failed write left (part of the line, or all of it unflushed) is cut off: a
        // settle its caller is told was not kept must not be replayed later. When even that
        // fails, the next change rewrites the file whole.
        try {
          if (fd !== null && size >= 0) ftruncateSync(fd, size);
          else torn = true;
        } catch {
          torn = true;
        }
      } finally {
        if (fd !== null) closeSync(fd);
      }
    }
    write();
  };

  /** Takes the files of owners that are gone; returns the settles new to this journal. */
  const takeOver = (): SettleRequest[] => {
    const taken: string[] = [];
    const fresh: SettleRequest[] = [];
    const found = [dir, ...adopt.filter((d) => d !== dir && existsSync(d))].flatMap((d) => orphans(d, lock.id, staleMs));
    for (const orphan of found) {
      // Another store's charges: left for a gateway of that store.
      if (!ofStore(orphan.file, options.store)) continue;
      const mine = lock.takeoverPath();
      try {
        renameSync(orphan.file, mine);
      } catch {
        continue; // another instance took it first
      }
      let settles: SettleRequest[];
      try {
        settles = readSettles(mine);
      } catch {
        continue; // kept under this journal's name: if it never reads, the next owner tries
      }
      taken.push(mine);
      for (const req of settles) {
        if (pending.has(idOf(req))) continue;
        pending.set(idOf(req), req);
        fresh.push(req);
      }
      forget(orphan, staleMs);
    }
    // The taken settles are in this journal's file before the taken files go.
    if (fresh.length) write();
    for (const file of taken) rmSync(file, { force: true });
    return fresh;
  };

  reserve();
  takeOver();
  const listeners: Array<(taken: SettleRequest[]) => void> = [];
  const timer = setInterval(() => {
    try {
      if (!lock.beat() && pending.size) write();
      const fresh = takeOver();
      if (fresh.length) for (const listener of listeners) listener(fresh);
    } catch {
      // A full or unreadable disk: the next heartbeat tries again; the settles are in memory.
    }
  }, heartbeatMs);
  // The journal never keeps the process alive: a settle still unlanded at exit stays on disk.
  timer.unref();

  return {
    add(req) {
      const id = idOf(req);
      const before = pending.get(id);
      const had = before !== undefined;
      // Kept already, unchanged (a replay that failed again keeps what it read): on disk as it is.
      if (had && !torn && encode(before) === encode(req)) return;
      pending.set(id, req);
      try {
        if (had) write();
        else append(req);
      } catch (err) {
        // Not on disk: the caller is told so and gives the settle up (its call fails), so a
        // later rewrite must not persist it after all, to be charged for an answer refused.
        if (!had) pending.delete(id);
        throw err;
      }
    },
    remove(req) {
      if (!pending.delete(idOf(req))) return;
      // The landed settle stays in the file (replaying it is harmless) until the file is
      // mostly landed ones, or none is left, or a torn line is to be mended.
      if (pending.size === 0 || torn || lines > 2 * pending.size + COMPACT_SLACK) write();
    },
    entries: () => [...pending.values()],
    onTakeOver: (listener) => void listeners.push(listener),
    close() {
      clearInterval(timer);
      rmSync(reservePath, { force: true });
      lock.release(pending.size > 0);
    },
  };
}
