/**
 * A minimal structured logger. The gateway logs ids, codes and timings, never request
 * bodies, keys or upstream credentials.
 */
export interface Logger {
  info(entry: Record<string, unknown>): void;
  warn(entry: Record<string, unknown>): void;
  error(entry: Record<string, unknown>): void;
}

function serialise(level: string, entry: Record<string, unknown>): string {
  const out: Record<string, unknown> = { level, time: new Date().toISOString() };
  for (const [k, v] of Object.entries(entry)) {
    out[k] = v instanceof Error ? { name: v.name, message: v.message, stack: v.stack } : v;
  }
  return JSON.stringify(out);
}

/** JSON lines on stderr (info on stdout). */
export function consoleLogger(): Logger {
  return {
    info: (e) => process.stdout.write(`${serialise('info', e)}\n`),
    warn: (e) => process.stderr.write(`${serialise('warn', e)}\n`),
    error: (e) => process.stderr.write(`${serialise('error', e)}\n`),
  };
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };
