/**
 * Running an example as a child process for the framework tests: start it, wait for the
 * line that says it listens, stop it (SIGTERM, then SIGKILL) when done.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const repoRoot = new URL('../../', import.meta.url).pathname;

export interface Spawned {
  /** What the `ready` pattern matched. */
  match: RegExpMatchArray;
  pid: number;
  /** The exit code once the process has exited (null when a signal ended it). */
  exited: Promise<number | null>;
  output(): string;
  stop(): Promise<void>;
}

export async function spawnServer(
  command: string,
  args: string[],
  options: { env?: Record<string, string>; ready: RegExp; timeoutMs: number; cwd?: string },
): Promise<Spawned> {
  const child = spawn(command, args, {
    cwd: options.cwd ?? repoRoot,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  const stop = () => stopChild(child);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const match = await new Promise<RegExpMatchArray>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} did not get ready in ${options.timeoutMs} ms:\n${output}`)), options.timeoutMs);
    const onData = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      const m = options.ready.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited with ${code}:\n${output}`));
    });
  }).catch(async (err: unknown) => {
    await stop();
    throw err;
  });
  return { match, pid: child.pid!, exited, output: () => output, stop };
}

/** Runs a command to completion and returns its stdout; rejects with all its output when it fails. */
export function run(command: string, args: string[], options: { env?: Record<string, string>; cwd?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd ?? repoRoot, env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let output = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
      output += c.toString('utf8');
    });
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(stdout) : reject(new Error(`${command} ${args.join(' ')} exited with ${code}:\n${output}`))));
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, signal);
    } catch {
      // Already gone.
    }
  };
  signalGroup('SIGTERM');
  const timer = setTimeout(() => signalGroup('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

/** A port nobody listens on right now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Writes `config` to a fresh temporary file; returns its path. */
export async function writeConfig(config: unknown): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'mg-frameworks-'));
  const file = join(dir, 'gateway.config.json');
  await writeFile(file, JSON.stringify(config, null, 2));
  return file;
}

/**
 * Holds an exclusive lock named `name` (a directory under .tmp/ holding the owner's pid) until
 * the returned release is called: test runs started at the same time (several people, one
 * checkout) take turns at the shared build outputs. A lock whose owner died is taken over.
 */
export async function acquireLock(name: string, timeoutMs: number): Promise<() => Promise<void>> {
  const dir = join(repoRoot, '.tmp', `${name}.lock`);
  await mkdir(join(repoRoot, '.tmp'), { recursive: true });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await mkdir(dir);
      await writeFile(join(dir, 'pid'), String(process.pid));
      return () => rm(dir, { recursive: true, force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const owner = Number(await readFile(join(dir, 'pid'), 'utf8').catch(() => 'NaN'));
    if (Number.isInteger(owner) && !isAlive(owner)) await rm(dir, { recursive: true, force: true });
    else if (Date.now() > deadline) throw new Error(`lock ${dir} still held by pid ${owner} after ${timeoutMs} ms`);
    else await new Promise((r) => setTimeout(r, 500));
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
