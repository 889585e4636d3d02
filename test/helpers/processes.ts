/**
 * Gateway instances as real child processes (the CLI, `serve`), for multi-instance tests:
 * start, read the listening line, kill (politely or with SIGKILL).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

export interface GatewayProcess {
  child: ChildProcess;
  baseURL: string;
  /** Everything the process wrote, for failure messages. */
  output(): string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export function writeConfig(config: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'mg-config-'));
  const file = join(dir, 'gateway.config.json');
  writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}

/**
 * Starts `model-gateway serve --config FILE --port 0` and waits for its listening line.
 * `wrap`: a command the gateway runs under (e.g. `unshare ...` to make it PID 1); `more.args`:
 * more serve flags (e.g. `--workers 2`), `more.startMs` how long it may take to listen.
 */
export function startGatewayProcess(
  configFile: string,
  env: NodeJS.ProcessEnv = {},
  wrap: string[] = [],
  more: { args?: string[]; startMs?: number } = {},
): Promise<GatewayProcess> {
  const args = [process.execPath, '--import', 'tsx', join(ROOT, 'src', 'cli.ts'), 'serve', '--config', configFile, '--port', '0', ...(more.args ?? [])];
  const [command, ...rest] = [...wrap, ...args];
  const child = spawn(command!, rest, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway process did not start:\n${out}`)), more.startMs ?? 30_000);
    const onData = () => {
      const m = /listening on (http:\/\/[^\s]+\/v1)/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      child.stdout!.off('data', onData);
      resolve({
        child,
        baseURL: m[1]!,
        output: () => out,
        async kill(signal = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          await exited;
        },
      });
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`gateway process exited (${code}) before listening:\n${out}`));
    });
  });
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI once (`model-gateway ARGS...`, from source) and collects its output and exit code. */
export function runCli(args: string[], timeoutMs = 30_000): Promise<CliResult> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli.ts'), ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve) => {
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The token charges of `account` in the books `file` configures, read through the CLI's `ledger`. */
export async function tokenChargesOf(file: string, account: string): Promise<Array<{ units: string; cost_usd: string }>> {
  const ledger = await runCli(['ledger', '--config', file, '--account', account]);
  if (ledger.code !== 0) throw new Error(`ledger failed: ${ledger.stderr}`);
  return ledger.stdout
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { units: string; cost_usd: string })
    .filter((e) => e.units === 'tokens');
}

