/**
 * The default logger gathers lines and writes them in batches: nothing is lost or reordered,
 * whether a batch fills, its timer runs, or the process exits with lines still gathered.
 */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

/** Runs `body` in a fresh node process with createLogger imported; returns its stdout lines. */
function linesOf(body: string): string[] {
  const script = `import { createLogger } from './src/observability/logs.ts';\n${body}`;
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'info' } });
  return out.split('\n').filter(Boolean);
}

describe('the default logger batches lines', () => {
  it('writes every line, in order, when the process exits with a batch still open (no timer ran)', () => {
    const lines = linesOf(`const log = createLogger('info'); for (let i = 0; i < 5; i++) log.info({ msg: 'line', i }); process.exit(0);`);
    expect(lines.map((l) => JSON.parse(l).i)).toEqual([0, 1, 2, 3, 4]);
  });

  it('writes full batches and the rest, in order, across many lines', () => {
    const lines = linesOf(`const log = createLogger('info'); for (let i = 0; i < 2000; i++) log.info({ msg: 'line', i, pad: 'x'.repeat(100) });`);
    expect(lines).toHaveLength(2000);
    expect(lines.map((l) => JSON.parse(l).i)).toEqual(Array.from({ length: 2000 }, (_, i) => i));
  });

  it('flushLogger writes the open batch before it returns: what the host prints next comes after', () => {
    for (let run = 0; run < 3; run++) {
      const lines = linesOf(
        `import { flushLogger } from './src/observability/logs.ts'; const log = createLogger('info'); for (let i = 0; i < 50; i++) log.info({ msg: 'line', i, pad: 'x'.repeat(500) }); flushLogger(log); process.stdout.write('{"marker":true}\\n'); setTimeout(() => process.exit(0), 50);`,
      );
      expect(lines).toHaveLength(51);
      expect(JSON.parse(lines[50]!)).toEqual({ marker: true });
    }
  });

  it('writes a lone line after its timer while the process keeps running', () => {
    const lines = linesOf(
      `const log = createLogger('info'); log.info({ msg: 'early' }); setTimeout(() => { process.stdout.write('{"marker":true}\\n'); process.exit(0); }, 400);`,
    );
    // The line left its batch by the timer (100 ms), long before the marker was printed.
    expect(lines.map((l) => JSON.parse(l).msg ?? 'marker')).toEqual(['early', 'marker']);
  });
});
