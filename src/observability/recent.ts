/**
 * The last requests this instance answered, for operators (the admin API's recent requests
 * and errors, and latency and error rate per model): a ring of fixed size fed by the same
 * call record the access line is written from, once the request is over. Memory is bounded by
 * the ring's size, whatever the traffic; each instance keeps its own (nothing is shared or
 * stored). Only /v1 traffic (and requests no route matched) is kept: the console's own admin
 * calls and the probes would otherwise push the business's requests out.
 */
import { formatUsd } from '../billing/money.js';
import type { CallRecord, Observer } from './record.js';

/** One request as the admin API shows it (snake_case, like the access line). */
export interface RecentRequest {
  request_id: string;
  /** When it was over, ISO 8601. */
  time: string;
  method: string;
  route: string;
  status: number;
  key_id: string | null;
  account: string | null;
  model: string | null;
  upstream: string | null;
  stream: boolean;
  /** Total time, to the end of the answer (a stream's included), ms. */
  latency_ms: number;
  cost_usd: string | null;
  error_code: string | null;
}

/** Latency and outcomes of one model's requests in the ring. */
export interface ModelStats {
  model: string;
  calls: number;
  /** Answers with a 5xx status (upstream failures, timeouts, open circuits). */
  errors: number;
  /** Answers with a 4xx status (limits, bad requests, unaffordable calls). */
  refused: number;
  /** errors / calls. */
  error_rate: number;
  p50_ms: number;
  p95_ms: number;
  max_ms: number;
}

export interface RecentFilter {
  account?: string | undefined;
  key?: string | undefined;
  /** Only answers with a status of 400 or more. */
  errors?: boolean | undefined;
  /**
   * Only requests older than this one (a request id of an earlier page: the next page). None
   * when it has left the ring meanwhile: the reader starts again from the newest.
   */
  before?: string | undefined;
  limit: number;
}

export interface RecentRequests {
  /** How many requests the ring keeps (0: none). */
  readonly size: number;
  observer: Observer;
  /** The matching requests, newest first. */
  list(filter: RecentFilter): RecentRequest[];
  /** Per model, over the requests in the ring, by model id. */
  modelStats(): ModelStats[];
}

/**
 * What the ring keeps of a request: the record's plain fields, copied (not the record, which
 * holds its span), and formatted only when read: the request path pays one small object.
 */
type Slot = Pick<CallRecord, 'requestId' | 'method' | 'route' | 'status' | 'keyId' | 'account' | 'model' | 'upstream' | 'stream'> & {
  at: number;
  ms: number;
  cost: bigint | null;
  errorCode: string | null;
};

function view(s: Slot): RecentRequest {
  return {
    request_id: s.requestId,
    time: new Date(s.at).toISOString(),
    method: s.method,
    route: s.route,
    status: s.status,
    key_id: s.keyId,
    account: s.account,
    model: s.model,
    upstream: s.upstream,
    stream: s.stream,
    latency_ms: Math.round(s.ms * 10) / 10,
    cost_usd: s.cost === null ? null : formatUsd(s.cost),
    error_code: s.errorCode,
  };
}

const kept = (route: string) => route.startsWith('/v1') || route === 'unmatched';

/** `sorted[p]` by nearest rank. */
const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? 0;

export function createRecentRequests(size: number, now: () => number): RecentRequests {
  const ring: (Slot | undefined)[] = new Array(size);
  let next = 0;
  /** Newest first. */
  function* slots(): Generator<Slot> {
    for (let i = 1; i <= size; i++) {
      const s = ring[(next - i + size) % size];
      if (!s) return;
      yield s;
    }
  }
  return {
    size,
    observer: {
      end(r: CallRecord, totalMs: number) {
        if (size === 0 || !kept(r.route)) return;
        ring[next] = {
          requestId: r.requestId,
          at: now(),
          method: r.method,
          route: r.route,
          status: r.status,
          keyId: r.keyId,
          account: r.account,
          model: r.model,
          upstream: r.upstream,
          stream: r.stream,
          ms: totalMs,
          cost: r.costNano,
          errorCode: r.errorCode,
        };
        next = (next + 1) % size;
      },
    },
    list(f) {
      const out: RecentRequest[] = [];
      let skipping = f.before !== undefined;
      for (const s of slots()) {
        if (skipping) {
          skipping = s.requestId !== f.before;
          continue;
        }
        if (out.length >= f.limit) break;
        if (f.account !== undefined && s.account !== f.account) continue;
        if (f.key !== undefined && s.keyId !== f.key) continue;
        if (f.errors && s.status < 400) continue;
        out.push(view(s));
      }
      return out;
    },
    modelStats() {
      const by = new Map<string, { latencies: number[]; errors: number; refused: number }>();
      for (const r of slots()) {
        if (r.model === null) continue;
        let m = by.get(r.model);
        if (!m) by.set(r.model, (m = { latencies: [], errors: 0, refused: 0 }));
        m.latencies.push(Math.round(r.ms * 10) / 10);
        if (r.status >= 500) m.errors++;
        else if (r.status >= 400) m.refused++;
      }
      return [...by]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([model, m]) => {
          const sorted = m.latencies.sort((a, b) => a - b);
          return {
            model,
            calls: sorted.length,
            errors: m.errors,
            refused: m.refused,
            error_rate: m.errors / sorted.length,
            p50_ms: percentile(sorted, 0.5),
            p95_ms: percentile(sorted, 0.95),
            max_ms: sorted.at(-1) ?? 0,
          };
        });
    },
  };
}
