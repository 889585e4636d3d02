/**
 * Logs: JSON lines through pino. One access line per request (when it is over: a stream when
 * it ended), and a warn line for each upstream failure naming its cause. Keys, bodies and
 * upstream credentials never appear: the lines are built from the call record's fields only.
 */
import { pino } from 'pino';
import type { Logger } from '../log.js';
import { formatUsd } from '../money.js';
import type { Observer } from './record.js';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/**
 * The default logger: pino writing JSON lines to stdout, at `level` (the LOG_LEVEL
 * environment variable wins when set). Any pino logger (or object with info/warn/error taking
 * an object) can be passed as `logger` instead.
 */
export function createLogger(level: LogLevel = 'info'): Logger {
  const fromEnv = process.env.LOG_LEVEL;
  return pino({
    level: fromEnv && /^(fatal|error|warn|info|debug|trace|silent)$/.test(fromEnv) ? fromEnv : level,
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    // Belt and braces: the gateway never logs these, and a plugin's log line must not either.
    redact: { paths: ['authorization', '*.authorization', 'apiKey', '*.apiKey', 'api_key', '*.api_key'], censor: '[redacted]' },
  });
}

const round = (ms: number) => Math.round(ms * 10) / 10;

/** The access line of every request. */
export function accessLog(log: Logger): Observer {
  return {
    end(r, totalMs) {
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
