/**
 * Logs: JSON lines through pino. One access line per request (when it is over: a stream when
 * it ended), and a warn line for each upstream failure naming its cause. Keys, bodies and
 * upstream credentials never appear: the lines are built from the call record's fields only.
 */
import { pino } from 'pino';
import type { Logger } from './log.js';
import { formatUsd } from '../billing/money.js';
import type { CallRecord, Observer } from './record.js';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

const SECRET_FIELDS = new Set(['authorization', 'apiKey', 'api_key']);
const CENSOR = '[redacted]';

/**
 * Belt and braces: the gateway never logs credentials, and a plugin's log line must not either.
 * A credential field at the top of a line, or one level down (`headers.authorization`), is
 * censored. This is a walk over the line's own keys, cheaper per line than pino's path-based
 * `redact` (which the access line, written for every request, would otherwise pay).
 */
export function censorSecrets(line: Record<string, unknown>): Record<string, unknown> {
  let out = line;
  for (const key in line) {
    const value = line[key];
    if (SECRET_FIELDS.has(key)) {
      if (out === line) out = { ...line };
      out[key] = CENSOR;
    } else if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      let inner: Record<string, unknown> | null = null;
      for (const k in value as Record<string, unknown>) {
        if (!SECRET_FIELDS.has(k)) continue;
        inner ??= { ...(value as Record<string, unknown>) };
        inner[k] = CENSOR;
      }
      if (inner) {
        if (out === line) out = { ...line };
        out[key] = inner;
      }
    }
  }
  return out;
}

/**
 * `log` with `redact` applied to every string of every line (nested objects and errors
 * included, a few levels deep): a warn line may carry an upstream's own words (an error
 * message, a failed poll's body), and those may echo an upstream key. Lines are rare next to
 * the access line, which keeps its own fast path: this logger writes it to the same
 * destination, and its fields (ids, codes, timings) carry no upstream text.
 */
export function redactingLogger(log: Logger, redact: (text: string) => string): Logger {
  const clean = (entry: Record<string, unknown>) => cleanValue(entry, redact, 0) as Record<string, unknown>;
  const out: Logger & { isLevelEnabled?(level: string): boolean } = {
    info: (e) => log.info(clean(e)),
    warn: (e) => log.warn(clean(e)),
    error: (e) => log.error(clean(e)),
  };
  const levels = log as Partial<{ isLevelEnabled(level: string): boolean }>;
  if (typeof levels.isLevelEnabled === 'function') out.isLevelEnabled = (level) => levels.isLevelEnabled!(level);
  const destination = destinations.get(log);
  if (destination) destinations.set(out, destination);
  return out;
}

/** How deep redactingLogger looks into a line. */
const CLEAN_DEPTH = 6;

/** `value` with `redact` applied to its strings: the same value when nothing changed. */
function cleanValue(value: unknown, redact: (text: string) => string, depth: number): unknown {
  if (typeof value === 'string') return redact(value);
  if (value === null || typeof value !== 'object' || depth >= CLEAN_DEPTH) return value;
  if (value instanceof Error) {
    const message = redact(value.message);
    const stack = value.stack === undefined ? undefined : redact(value.stack);
    const cause = cleanValue(value.cause, redact, depth + 1);
    if (message === value.message && stack === value.stack && cause === value.cause) return value;
    // A plain copy: the error itself may be the one a client is answered with.
    return { name: value.name, message, stack, ...(cause === undefined ? {} : { cause }) };
  }
  if (Array.isArray(value)) {
    let copy: unknown[] | null = null;
    value.forEach((v, i) => {
      const c = cleanValue(v, redact, depth + 1);
      if (c !== v) (copy ??= [...value])[i] = c;
    });
    return copy ?? value;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return value;
  let copy: Record<string, unknown> | null = null;
  for (const k in value as Record<string, unknown>) {
    const v = (value as Record<string, unknown>)[k];
    const c = cleanValue(v, redact, depth + 1);
    if (c !== v) (copy ??= { ...(value as Record<string, unknown>) })[k] = c;
  }
  return copy ?? value;
}

/** How many characters of log lines are gathered before they are handed on in one write. */
const BATCH_CHARS = 16 * 1024;
/** How long a line may wait in a batch. */
const BATCH_MS = 100;

/**
 * Log lines gathered into one string and handed to the destination at BATCH_CHARS or after
 * BATCH_MS, in the order they came. The stdout destination (sonic-boom) measures the byte
 * length of its whole pending buffer on every write it is given, so a write per line cost
 * more the larger its batches; given one string per batch it measures each batch once, and
 * makes one write(2) of it.
 */
class LineBatch implements LineDestination {
  private pending = '';
  private timer: NodeJS.Timeout | undefined;
  private readonly onTimer = () => {
    this.timer = undefined;
    this.flush();
  };

  constructor(private readonly out: LineDestination) {}

  write(line: string): boolean {
    if (this.pending === '') holding(this);
    this.pending += line;
    if (this.pending.length >= BATCH_CHARS) this.flush();
    else this.timer ??= setTimeout(this.onTimer, BATCH_MS).unref();
    return true;
  }

  /** Hands what is gathered to the destination; `callback` (pino's logger.flush) once it took it. */
  flush(callback?: (err?: Error) => void): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.pending !== '') {
      const text = this.pending;
      this.pending = '';
      openBatches.delete(this);
      this.out.write(text);
    }
    if (!callback) return;
    if (this.out.flush) this.out.flush(callback);
    else callback();
  }

  flushSync(): void {
    this.flush();
    this.out.flushSync?.();
  }
}

/** The batches holding lines now, written out when the process exits (one listener for them all). */
const openBatches = new Set<LineBatch>();
let exitHooked = false;
function holding(batch: LineBatch): void {
  openBatches.add(batch);
  if (exitHooked) return;
  exitHooked = true;
  process.once('exit', () => {
    for (const b of openBatches) {
      try {
        b.flushSync();
      } catch {
        // Nothing more can be done for these lines at exit.
      }
    }
  });
}

/**
 * The default logger: pino writing JSON lines to stdout, at `level` (the LOG_LEVEL
 * environment variable wins when set). Any pino logger (or object with info/warn/error taking
 * an object) can be passed as `logger` instead.
 *
 * Lines are gathered and written in batches (at 16 KB, or after 100 ms, whichever comes
 * first) rather than one write(2) per line: an access line per request made the system call
 * one of the gateway's largest costs per call. Each batch is one synchronous write (at a few
 * thousand calls a second, a few hundred writes a second). A process that exits writes out what is
 * gathered; one killed with SIGKILL can lose the last 100 ms of lines. A `destination` given
 * here gets every line as it is made.
 */
export function createLogger(level: LogLevel = 'info', given?: LineDestination): Logger {
  let destination: LineDestination;
  if (given) destination = given;
  else {
    // Synchronous writes, one per batch: a batch is written before flushSync returns, so the
    // gateway's last lines come before what its host prints after dispose().
    destination = new LineBatch(pino.destination({ dest: 1, sync: true }));
  }
  const fromEnv = process.env.LOG_LEVEL;
  const logger = pino(
    {
      level: fromEnv && /^(fatal|error|warn|info|debug|trace|silent)$/.test(fromEnv) ? fromEnv : level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { log: censorSecrets },
    },
    destination as pino.DestinationStream,
  );
  destinations.set(logger, destination);
  return logger;
}

/** Where a logger's JSON lines go (a pino destination, or any stream with `write`). */
export interface LineDestination {
  write(line: string): unknown;
  flushSync?(): void;
  flush?(callback?: (err?: Error) => void): void;
}

/**
 * Writes out what a logger made by createLogger still buffers, now. Called when the gateway is
 * disposed, so its last lines come before whatever the host process prints next.
 */
export function flushLogger(log: Logger): void {
  try {
    destinations.get(log)?.flushSync?.();
  } catch {
    // A destination that cannot write now keeps its lines for pino's exit flush.
  }
}

/**
 * The loggers createLogger made, and where each writes. The access line, written for every
 * request, is serialised by hand straight into that destination: its fields are known and
 * carry no secret, and pino's generic path (a key-by-key walk, the censor, a second copy of
 * the object) cost several times more per line. The line is the same JSON pino would write.
 */
const destinations = new WeakMap<object, LineDestination>();

const round = (ms: number) => Math.round(ms * 10) / 10;

const str = (v: string | null): string => (v === null ? 'null' : JSON.stringify(v));

/**
 * JSON strings of the values that repeat from line to line (method, route, key id, account,
 * model, upstream): quoted once, then looked up. Bounded: a full cache starts over.
 */
const quoted = new Map<string, string>();
function cachedStr(v: string | null): string {
  if (v === null) return 'null';
  let q = quoted.get(v);
  if (q === undefined) {
    if (quoted.size >= 2_000) quoted.clear();
    quoted.set(v, (q = JSON.stringify(v)));
  }
  return q;
}

/** The ISO time of the current second up to its ".", made once per second ("2026-11-24T03:04:05."). */
let isoSecond = Number.NaN;
let isoPrefix = '';

/** `new Date().toISOString()`, with the date part formatted once per second. */
export function isoNow(ms = Date.now()): string {
  const second = Math.floor(ms / 1000);
  if (second !== isoSecond) {
    const iso = new Date(ms).toISOString();
    // Years past 9999 are written with a sign and six digits: no prefix to reuse.
    if (iso.length !== 24) return iso;
    isoSecond = second;
    isoPrefix = iso.slice(0, 20);
  }
  const milli = ms - second * 1000;
  return `${isoPrefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
}

/** The access line as pino would write it at level info (30), with its newline. */
export function accessLine(r: CallRecord, totalMs: number): string {
  let line = `{"level":30,"time":"${isoNow()}","msg":"access","request_id":${str(r.requestId)},"method":${cachedStr(r.method)},"route":${cachedStr(r.route)},"status":${r.status},"key_id":${cachedStr(r.keyId)},"account":${cachedStr(r.account)},"model":${cachedStr(r.model)},"upstream":${cachedStr(r.upstream)},"ms":${round(totalMs)},"upstream_ms":${round(r.upstreamMs)}`;
  if (r.ttfbMs !== null) line += `,"ttfb_ms":${round(r.ttfbMs)}`;
  if (r.promptTokens !== null) line += `,"prompt_tokens":${r.promptTokens}`;
  if (r.completionTokens !== null) line += `,"completion_tokens":${r.completionTokens}`;
  if (r.costNano !== null) line += `,"cost_usd":"${formatUsd(r.costNano)}"`;
  if (r.limit !== null) line += `,"limit":${cachedStr(r.limit)}`;
  if (r.guardrails !== null) line += `,"guardrails":${JSON.stringify(r.guardrails)}`;
  if (r.errorCode !== null) line += `,"error":${cachedStr(r.errorCode)}`;
  return `${line}}\n`;
}

/** The access line of every request. */
export function accessLog(log: Logger): Observer {
  const destination = destinations.get(log);
  const levels = log as Partial<{ isLevelEnabled(level: string): boolean }>;
  return {
    end(r, totalMs) {
      if (destination && levels.isLevelEnabled?.('info')) {
        destination.write(accessLine(r, totalMs));
        return;
      }
      const line: Record<string, unknown> = {
        msg: 'access',
        request_id: r.requestId,
        method: r.method,
        route: r.route,
        status: r.status,
        key_id: r.keyId,
        account: r.account,
        model: r.model,
        upstream: r.upstream,
        ms: round(totalMs),
        upstream_ms: round(r.upstreamMs),
      };
      if (r.ttfbMs !== null) line.ttfb_ms = round(r.ttfbMs);
      if (r.promptTokens !== null) line.prompt_tokens = r.promptTokens;
      if (r.completionTokens !== null) line.completion_tokens = r.completionTokens;
      if (r.costNano !== null) line.cost_usd = formatUsd(r.costNano);
      if (r.limit !== null) line.limit = r.limit;
      if (r.guardrails !== null) line.guardrails = r.guardrails;
      if (r.errorCode !== null) line.error = r.errorCode;
      log.info(line);
    },
  };
}

/** What a transport failure was, for the warn line: DNS, connect refused, TLS, timeout, reset. */
export function failureCause(err: unknown): string {
  const seen = new Set<unknown>();
  let e: unknown = err;
  while (e && typeof e === 'object' && !seen.has(e)) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    const name = (e as { name?: unknown }).name;
    if (code === 'ECONNREFUSED') return 'connect_refused';
    if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'dns';
    if (code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_SOCKET') return 'reset';
    if (typeof code === 'string' && (code.startsWith('ERR_TLS') || code.startsWith('CERT_') || code.includes('SSL'))) return 'tls';
    if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || name === 'TimeoutError') {
      return 'timeout';
    }
    e = (e as { cause?: unknown }).cause;
  }
  return 'error';
}
