/**
 * One zod schema for the options object and the config file (one shape for both). Every field
 * has its default in the schema; errors name the path of the bad field. The upstream, model and
 * storage sections, and the field validators they share, are in src/options/.
 */
import { z } from 'zod';
import { cacheSchema } from './options/cache.js';
import { guardrailSchema } from './options/guardrails.js';
import { formatIssues } from './options/issues.js';
import { modelSchema } from './options/model.js';
import { referenceProblems } from './options/references.js';
import { storageSchema } from './options/storage.js';
import { upstreamSchema } from './options/upstream.js';
import { budgetSchema, entityId, modelPattern, secret, sectionName, usdAmount } from './options/values.js';

export { mediaPricingSchema, modelSchema, textPricingSchema } from './options/model.js';

// As the gateway reads a key (40 to 200 letters or digits): a seeded key outside it could never authenticate.
const keyFormat = /^sk-mg-[A-Za-z0-9]{40,200}$/;

const alertThresholds = z.strictObject({
  /** Percents of a key's monthly cap, e.g. [50, 80, 100]. */
  capPercent: z.array(z.number().positive().max(1000)).optional(),
  /** Wallet balances (USD) whose crossing downwards alerts, e.g. ["10", "1"]. */
  balanceBelowUsd: z.array(usdAmount).optional(),
});

/** Budget alerts (see src/alerts): thresholds by default, per account and per key id. */
const budgetAlertsSchema = z.strictObject({
  webhook: z.strictObject({
    url: z.url({ protocol: /^https?$/ }),
    /** The HMAC-SHA256 key the receiver verifies `x-mg-signature` with. */
    secret,
    /** Attempts per alert (the first included). @default 6 */
    maxAttempts: z.number().int().min(1).max(20).default(6),
    /** Delay before the first retry; it doubles each time. @default 500 */
    backoffMs: z.number().int().nonnegative().default(500),
    /** Per attempt, at most an hour. @default 10000 */
    timeoutMs: z.number().int().positive().max(3_600_000).default(10_000),
  }),
  /** @default {capPercent: [50, 80, 100]} */
  defaults: alertThresholds.default({ capPercent: [50, 80, 100] }),
  /** By account id: replaces the defaults for that account (its keys included). @default {} */
  accounts: z.record(z.string(), alertThresholds).default({}),
  /** By key id ("key_..."): replaces the cap percents for that key. @default {} */
  keys: z.record(z.string(), alertThresholds.pick({ capPercent: true })).default({}),
});

export const optionsSchema = z.strictObject({
  /** Shown as `owned_by` on media rows. @default "model-gateway" */
  serviceName: z.string().min(1).default('model-gateway'),
  /** @default {} */
  upstreams: z.record(sectionName, upstreamSchema).default({}),
  /** @default [] */
  models: z.array(modelSchema).default([]),
  /** @default [] */
  accounts: z
    .array(
      z.strictObject({
        id: entityId,
        walletUsd: usdAmount.default(0),
        grants: z.array(z.string()).default([]),
        /** Spending budgets across the account's keys, e.g. `[{usd: "50", period: "week"}]`. @default [] */
        budgets: z.array(budgetSchema).default([]),
      }),
    )
    .default([]),
  /** Seeded keys, for development and tests. @default [] */
  keys: z
    .array(
      z.strictObject({
        key: z.string().regex(keyFormat, 'must look like "sk-mg-" followed by 40 to 200 letters or digits'),
        account: z.string().min(1),
        kind: z.enum(['developer', 'agent']).default('developer'),
        model: z.string().nullable().default(null),
        label: z.string().nullable().default(null),
        monthlyCapUsd: usdAmount.nullable().default(null),
        /** Models the key may call: exact ids or a trailing `*` (`["acme/*"]`). @default null (all) */
        models: z.array(modelPattern).nullable().default(null),
        /** Tokens per minute, over `limits.keyTokensPerMinute`. @default null (the default) */
        tokensPerMinute: z.number().int().positive().nullable().default(null),
        /** Budgets per period, beside the monthly cap: `[{usd: "5", period: "day"}]`. @default [] */
        budgets: z.array(budgetSchema).default([]),
      }),
    )
    .default([]),
  /** @default [] */
  brands: z
    .array(
      z.strictObject({
        id: entityId,
        account: z.string().min(1),
        name: z.string().default(''),
        description: z.string().default(''),
        voice: z.string().min(1),
      }),
    )
    .default([]),
  /** @default [] */
  documents: z
    .array(
      z.strictObject({
        id: entityId,
        account: z.string().min(1),
        brand: z.string().nullable().default(null),
        title: z.string().default(''),
        text: z.string().min(1),
      }),
    )
    .default([]),
  limits: z
    .strictObject({
      /** @default 120 */
      keyRequestsPerMinute: z.number().int().positive().default(120),
      /** @default 60 */
      ipRequestsPerMinute: z.number().int().positive().default(60),
      /**
       * Tokens (prompt and most output, as a hold counts them) per key in any 60 s; a key's own
       * `tokensPerMinute` overrides it. @default null (no token limit)
       */
      keyTokensPerMinute: z.number().int().positive().nullable().default(null),
      /**
       * The per-IP window groups IPv6 clients by this many leading bits: one host usually holds
       * a whole /64 and could otherwise rotate addresses to escape the limit. 128 counts each
       * address alone. IPv4 (and IPv4-mapped IPv6) is always one address. @default 64
       */
      ipv6PrefixLength: z.number().int().min(1).max(128).default(64),
      /** @default 8 */
      inFlightImageJobs: z.number().int().positive().default(8),
      /** @default 8 */
      inFlightVideoJobs: z.number().int().positive().default(8),
      /** @default 50000 */
      inlineImageDeadlineMs: z.number().int().positive().default(50_000),
      /** @default 30000 */
      inFlightLeaseTtlMs: z.number().int().positive().default(30_000),
      /** The largest file `POST /v1/files` takes (a batch's input). @default 104857600 (100 MiB) */
      maxFileBytes: z.number().int().positive().default(100 * 1024 * 1024),
      /**
       * The bytes of files (uploads and batch output) an account may keep; an upload past it is
       * refused. Files cost nothing to keep, so without a bound any key could fill the store.
       * @default 1073741824 (1 GiB)
       */
      maxFileBytesPerAccount: z.number().int().positive().default(1024 * 1024 * 1024),
      /**
       * Lines of one batch the gateway runs at once on an upstream without a Batch API (they
       * are outside the key's per-minute limits). @default 4
       */
      batchConcurrency: z.number().int().positive().max(256).default(4),
      /** @default 1048576 (1 MiB) */
      maxBodyBytes: z.number().int().positive().default(1_048_576),
      /** A client that has not sent its whole body by then gets 408. @default 30000 */
      bodyTimeoutMs: z.number().int().positive().default(30_000),
      /** SSE comment sent while the upstream is silent. @default 15000 */
      streamKeepAliveMs: z.number().int().positive().default(15_000),
      /** Tokens of knowledge passages injected per request. @default 1500 */
      knowledgeTokenBudget: z.number().int().positive().default(1500),
      /** How often the gateway polls an upstream video job. @default 1000 */
      jobPollIntervalMs: z.number().int().positive().default(1000),
      /** How long a finished job stays pollable. @default 86400000 (24 h) */
      jobTtlMs: z.number().int().positive().default(86_400_000),
      /**
       * How long a call's hold lives without renewal. Live calls renew theirs every third of it;
       * a crashed instance's holds stop counting after it. @default 3600000 (1 h)
       */
      holdTtlMs: z.number().int().positive().default(3_600_000),
      /**
       * How long an Idempotency-Key's in-flight marker lives without renewal. A running call
       * renews it every third of this; a crashed instance's marker frees its key after it.
       * @default 600000 (10 min)
       */
      idempotencyLockTtlMs: z.number().int().positive().default(600_000),
    })
    .prefault({}),
  /**
   * What Idempotency-Key replays may keep. Every stored answer counts against its account, so
   * one tenant's keys cannot fill the process (memory) or the store that holds everyone's books.
   */
  idempotency: z
    .strictObject({
      /**
       * Bytes of stored answers per account; storing one past it evicts the account's oldest
       * (a retry with an evicted key runs again). @default 67108864 (64 MiB)
       */
      maxBytesPerAccount: z.number().int().positive().default(64 * 1024 * 1024),
      /**
       * An answer whose body is larger is not stored: a retry with its key gets 422
       * idempotency_key_unreplayable (409 while the first call still runs). @default 1048576 (1 MiB)
       */
      maxAnswerBytes: z.number().int().positive().default(1024 * 1024),
    })
    .prefault({}),
  /**
   * Retries and fallbacks of upstream calls. A call is retried (on the next target, or the same
   * one when the model has one) after a connection failure, a timeout, an upstream 5xx or 429,
   * and only while nothing has been sent to the client.
   */
  routing: z
    .strictObject({
      /** Extra attempts per call after the first. @default 2 */
      retries: z.number().int().nonnegative().max(10).default(2),
      /** Base of the jittered exponential backoff between attempts. @default 100 */
      backoffMs: z.number().int().nonnegative().default(100),
      /** No new attempt starts this long after the first one did. @default 30000 */
      deadlineMs: z.number().int().positive().default(30_000),
      /** An upstream 429's Retry-After up to this is waited out before retrying it; a longer one is not. @default 2000 */
      maxRetryAfterMs: z.number().int().nonnegative().default(2000),
      /**
       * A half-open circuit's probe call that has had no answer (or failure) this long after it
       * was sent counts as failed, so a probe that never ends cannot keep the circuit open for
       * every tenant. A probe whose client leaves counts as failed at once. @default 60000
       */
      probeDeadlineMs: z.number().int().positive().default(60_000),
    })
    .prefault({}),
  /**
   * On shutdown (SIGTERM, dispose()), how long calls and streams in flight may take to finish
   * before they are cut (what they produced is billed). @default 30000
   */
  shutdownGraceMs: z.number().int().nonnegative().default(30_000),
  /**
   * How long a stream whose client left after the answer's end (a finish_reason, the last
   * output text) is still read for the usage that follows it, so that usage is billed. @default 5000
   */
  usageGraceMs: z.number().int().nonnegative().default(5_000),
  /**
   * Directory where settles the store could not take are kept on disk until they land
   * (replayed at start, also those of a crashed instance). Null keeps them in memory only.
   * The CLI uses `./data/settle-journal` for every storage but memory. @default null
   */
  settleJournalDir: z.string().min(1).nullable().default(null),
  /**
   * Earlier settle journal folders of the same store, whose unlanded settles this gateway takes
   * over (once their owners are gone) and replays. The CLI names the folder it used before
   * its folder name stopped depending on the storage's password and timeouts. @default []
   */
  settleJournalAdopt: z.array(z.string().min(1)).default([]),
  /**
   * Prometheus metrics in the text format at `path` (outside /v1), off when absent. With a
   * `token`, scrapes must send it as a bearer token. @default null
   */
  metrics: z
    .strictObject({
      path: z.string().regex(/^\/[A-Za-z0-9/_.-]*$/, 'must be a path such as "/metrics"').default('/metrics'),
      token: z.string().min(1).optional(),
    })
    .nullable()
    .default(null),
  /** Level of the default logger (pino, JSON lines on stdout); LOG_LEVEL overrides it. @default "info" */
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** One JSON line per request (request id, route, status, key id, model, timings, tokens, cost). @default true */
  accessLog: z.boolean().default(true),
  /** Proxies (IPs or CIDRs) whose X-Forwarded-For is believed. @default [] */
  trustProxy: z.array(z.string()).default([]),
  /**
   * CORS for browser apps: the origins allowed to call the gateway (["*"] for any); preflights
   * are answered. Off by default (null): browsers then refuse cross-origin answers.
   * @example { "origins": ["https://app.example.com"] }
   * @default null
   */
  cors: z
    .strictObject({
      origins: z
        .array(z.string().regex(/^(\*|https?:\/\/[^/\s?#]+)$/, 'must be an origin such as "https://app.example.com" (no path), or "*"'))
        .min(1),
      /** How long a browser may reuse a preflight answer. @default 600 */
      maxAgeSeconds: z.number().int().nonnegative().max(86_400).default(600),
    })
    .nullable()
    .default(null),
  /**
   * The admin HTTP API under /admin/v1 and the web console at /admin, served only when set.
   * Only the hex SHA-256 of the admin token is configured: the token itself is never stored.
   * @example { "tokenSha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" }
   * @default null
   */
  admin: z
    .strictObject({
      tokenSha256: z.string().regex(/^[0-9a-fA-F]{64}$/, 'must be the hex SHA-256 of the admin token (64 hex digits)'),
      /** Who the token is in the admin change log ("ops", "billing-team"). @default "admin" */
      label: z.string().min(1).max(100).default('admin'),
      /** Requests each instance keeps for the console's recent requests and per-model latency (0: none). @default 1000 */
      recentRequests: z.number().int().min(0).max(100_000).default(1000),
    })
    .nullable()
    .default(null),
  /** Checks on every prompt before it goes upstream: PII redaction or blocking, regexes (src/guardrails). @default [] */
  guardrails: z.array(guardrailSchema).default([]),
  /** Budget alerts: signed webhooks when spend or a balance crosses a threshold. @default null */
  alerts: budgetAlertsSchema.nullable().default(null),
  /** The response cache (exact match, per account or key): off when null. @default null */
  cache: cacheSchema.nullable().default(null),
  storage: storageSchema.default({ driver: 'memory' }),
});

export type GatewayConfigInput = z.input<typeof optionsSchema>;
export type GatewayConfig = z.output<typeof optionsSchema>;
export type ModelConfig = z.output<typeof modelSchema>;
export type UpstreamConfig = GatewayConfig['upstreams'][string];

/**
 * Validates options; the error has a line per bad field: its path in JS notation and what
 * was expected and given (`models[0].pricing.prompt: expected a decimal string such as
 * "0.000001", got the number 1.5e-7`), with the nearest known name for an unknown key.
 */
export function parseOptions(input: unknown): GatewayConfig {
  // A "__proto__" key (JSON.parse makes it an own key) never reaches a record's key check.
  const upstreams = (input as { upstreams?: unknown } | null)?.upstreams;
  if (upstreams && typeof upstreams === 'object' && Object.hasOwn(upstreams, '__proto__')) {
    throw new ConfigError('invalid gateway options:\n  upstreams["__proto__"]: is a name every object has; choose another');
  }
  const result = optionsSchema.safeParse(input, { reportInput: true });
  if (result.success) return crossCheck(result.data);
  const lines = formatIssues(result.error.issues, optionsSchema, input).map((l) => `  ${l}`);
  throw new ConfigError(`invalid gateway options:\n${lines.join('\n')}`);
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** References between sections (a key's account, a model's upstream) are checked here. */
function crossCheck(cfg: GatewayConfig): GatewayConfig {
  const problems = referenceProblems(cfg);
  if (problems.length) throw new ConfigError(`invalid gateway options:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  return cfg;
}
