/**
 * What the gateway observed of one request, filled in as it goes (the pipeline, the route,
 * the upstream relay, the billed call) and handed to the observers (access log, metrics,
 * traces) once the request is over: when its answer was returned and, for a stream or a job,
 * when its billed call ended. Never holds a key, a body or an upstream credential.
 */
import type { Span } from '@opentelemetry/api';

export interface CallRecord {
  requestId: string;
  method: string;
  /** The route pattern ("/v1/chat/completions"), or the path for health, readiness, 404s. */
  route: string;
  status: number;
  keyId: string | null;
  account: string | null;
  model: string | null;
  upstream: string | null;
  stream: boolean;
  /** performance.now() at arrival. */
  startedAt: number;
  /** Time spent waiting on the upstream for the answer's headers, ms (summed over calls). */
  upstreamMs: number;
  /** Streams: ms from arrival to the first byte of the answer's body. */
  ttfbMs: number | null;
  promptTokens: number | null;
  completionTokens: number | null;
  /** What was billed, nano-USD. */
  costNano: bigint | null;
  /** A refusal's `metadata.limit` / `limit_source`. */
  limit: string | null;
  /** The guardrails that acted on the prompt or the answer (redacted it, blocked it, or could not answer), in order. */
  guardrails: GuardrailAction[] | null;
  errorCode: string | null;
  /** The request's span (a no-op span when no tracer provider is registered). */
  span: Span | null;
  /** ms from arrival until the answer was handed to the server (gateway time + upstream wait). */
  respondedMs: number | null;
}

export interface GuardrailAction {
  /** The guardrail's id (a plugin's: the id it gave, or its name when it could not answer). */
  id: string;
  action: 'redact' | 'block' | 'unavailable';
  /** Set when it acted on the answer (absent: on the prompt). */
  on?: 'output';
}

/** Things that watch requests: each gets the record at the start and once the request is over. */
export interface Observer {
  start?(record: CallRecord): void;
  end(record: CallRecord, totalMs: number): void;
}

/** A record's lifetime: open while its answer is being produced and while its billed call runs. */
export interface Tracked {
  record: CallRecord;
  /** Something more must end before the request is over (a stream, a job's billed call). */
  hold(): void;
  /** One of the holds ended. */
  release(): void;
}

export function newRecord(requestId: string, method: string, route: string, span: Span | null): CallRecord {
  return {
    requestId,
    method,
    route,
    status: 0,
    keyId: null,
    account: null,
    model: null,
    upstream: null,
    stream: false,
    startedAt: performance.now(),
    upstreamMs: 0,
    ttfbMs: null,
    promptTokens: null,
    completionTokens: null,
    costNano: null,
    limit: null,
    guardrails: null,
    errorCode: null,
    span,
    respondedMs: null,
  };
}

/** Tracks `record`, calling every observer's end once the answer and all holds are done. */
export function track(record: CallRecord, observers: readonly Observer[], onError: (err: unknown) => void): Tracked {
  let open = 1;
  for (const o of observers) {
    try {
      o.start?.(record);
    } catch (err) {
      onError(err);
    }
  }
  return {
    record,
    hold() {
      open++;
    },
    release() {
      if (--open !== 0) return;
      const total = performance.now() - record.startedAt;
      for (const o of observers) {
        try {
          o.end(record, total);
        } catch (err) {
          onError(err);
        }
      }
    },
  };
}
