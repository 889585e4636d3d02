/** Child processes for the benchmark: start, wait for "listening on URL", read RSS / CPU from /proc, stop. */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';

export interface Child {
  name: string;
  proc: ChildProcess;
  pid: number;
  /** The URL the process printed when it started listening. */
  url: string;
  /** Resolves with the exit code (or signal name) once the process has exited. */
  exited: Promise<number | string | null>;
  /** Last lines of stderr, for error reports. */
  stderrTail(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
  stop(graceMs?: number): Promise<void>;
}

const LISTENING = /listening on (https?:\/\/[^\s/]+)/;

/**
 * Starts `node <nodeArgs...>` in `cwd` and waits until its stdout matches `ready` (by default
 * "listening on URL"); the first group of the match is the child's URL.
 */
export function startNode(name: string, nodeArgs: string[], cwd: string, timeoutMs = 60_000, ready: RegExp = LISTENING): Promise<Child> {
  const proc = spawn(process.execPath, nodeArgs, { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env } });
  const tail: string[] = [];
  const keep = (s: string) => {
    tail.push(s);
    if (tail.length > 40) tail.shift();
  };
  proc.stderr!.setEncoding('utf8').on('data', (s: string) => keep(s));
  const exited = new Promise<number | string | null>((resolve) => proc.once('exit', (code, signal) => resolve(code ?? signal)));

  return new Promise<Child>((resolve, reject) => {
    let out = '';
    let done = false;
    const timer = setTimeout(() => fail(new Error(`${name} did not start within ${timeoutMs} ms`)), timeoutMs);
    const fail = (err: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      proc.kill('SIGKILL');
      reject(new Error(`${err.message}\n--- ${name} stderr ---\n${tail.join('')}\n--- stdout ---\n${out}`));
    };
    proc.once('error', fail);
    void exited.then((code) => fail(new Error(`${name} exited (${code}) before it was listening`)));
    proc.stdout!.setEncoding('utf8').on('data', (s: string) => {
      if (done) return;
      out += s;
      const m = ready.exec(out);
      if (!m) return;
      done = true;
      clearTimeout(timer);
      resolve({
        name,
        proc,
        pid: proc.pid!,
        url: m[1]!,
        exited,
        stderrTail: () => tail.join(''),
        async stop(graceMs = 10_000) {
          if (proc.exitCode !== null || proc.signalCode !== null) return;
          proc.kill('SIGTERM');
          const kill = setTimeout(() => proc.kill('SIGKILL'), graceMs);
          await exited;
          clearTimeout(kill);
        },
      });
    });
  });
}

/** VmRSS and VmHWM (peak RSS) of a process, in bytes; null once it is gone. */
export function memoryOf(pid: number): { rss: number; hwm: number } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return null;
  }
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

const TICKS_PER_S = 100; // USER_HZ on Linux

/** CPU time (user + system) a process has used so far, in ms. */
export function cpuMsOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the ")" closing the command name: state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_S;
  } catch {
    return NaN;
  }
}

/** CPU time the whole machine has been busy (all cores, idle and iowait excluded) and stolen by the hypervisor, in ms. */
export function machineCpuMs(): { busy: number; steal: number } {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    // cpu  user nice system idle iowait irq softirq steal guest guest_nice
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
    const busy = total - f[3]! - f[4]!;
    return { busy: (busy * 1000) / TICKS_PER_S, steal: ((f[7] ?? 0) * 1000) / TICKS_PER_S };
  } catch {
    return { busy: NaN, steal: NaN };
  }
}

/** CPU ms this process (all threads) has used. */
export function selfCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** Samples VmRSS of some processes every `intervalMs` and keeps each one's peak. */
export class RssSampler {
  private readonly peaks = new Map<number, number>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly pids: number[],
    intervalMs = 200,
  ) {
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  sample(): void {
    for (const pid of this.pids) {
      const m = memoryOf(pid);
      if (m && m.rss > (this.peaks.get(pid) ?? 0)) this.peaks.set(pid, m.rss);
    }
  }

  peak(pid: number): number {
    return this.peaks.get(pid) ?? NaN;
  }

  stop(): void {
    clearInterval(this.timer);
    this.sample();
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A TCP port on 127.0.0.1 that was free a moment ago, for a server that cannot be told to pick its own. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * The local ports of a process's TCP connections to `remotePort`: its socket inodes from
 * /proc/<pid>/fd, matched against the kernel's TCP tables. A server on the other end can map
 * these ports to the processes that serve them (PostgreSQL's pg_stat_activity.client_port).
 */
export function tcpLocalPortsTo(pid: number, remotePort: number): number[] {
  const inodes = new Set<string>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // The descriptor closed while the list was read.
    }
  }
  const ports: number[] = [];
  for (const table of ['tcp', 'tcp6']) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || !inodes.has(f[9]!)) continue;
      const port = (addr: string) => Number.parseInt(addr.slice(addr.lastIndexOf(':') + 1), 16);
      if (port(f[2]!) === remotePort) ports.push(port(f[1]!));
    }
  }
  return ports;
}
