/**
 * The `upstreams` section: each named upstream is an HTTP provider (`{baseUrl, apiKey}`), the
 * built-in simulator (`{simulate: true}`) or an upstream client object of the embedder's.
 */
import { z } from 'zod';
import type { UpstreamClient } from '../upstream/client.js';
import { headerValue, secret } from './values.js';

/**
 * The wire API the upstream speaks: `openai` (chat completions, Responses, ...), `anthropic`
 * (the Messages API, `x-api-key`) or `gemini` (`generateContent`, `x-goog-api-key`). Requests
 * are translated to it and its answers back. @default "openai"
 */
const kind = z.enum(['openai', 'anthropic', 'gemini']).default('openai');

const httpUpstream = z.strictObject({
  kind,
  baseUrl: z.url({ protocol: /^https?$/ }),
  /**
   * Sent as `Authorization: Bearer <apiKey>` (`x-api-key` to an `anthropic` upstream,
   * `x-goog-api-key` to a `gemini` one). Leave it out for an upstream that takes no key;
   * an empty one is refused (it is almost always an unset environment variable).
   */
  apiKey: secret.pipe(headerValue).default(''),
  /** @default 60000 */
  timeoutMs: z.number().int().positive().default(60_000),
  /** Upstream connections kept per origin. @default 256 */
  connections: z.number().int().positive().default(256),
  /** The most connections opened to this upstream at once (overrides `connections`). */
  maxConnections: z.number().int().positive().optional(),
  /**
   * Extra headers sent on every call, e.g. Azure's `{"api-key": "..."}` or Anthropic's
   * `{"anthropic-version": "2023-06-01"}`. They replace a client header of the same name. @default {}
   */
  headers: z.record(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be a header name'), headerValue).default({}),
  /** Query parameters added to every call's URL, e.g. Azure's `{"api-version": "2024-10-21"}`. @default {} */
  query: z.record(z.string().min(1), z.string()).default({}),
  /**
   * The upstream speaks OpenAI's Batch and Files APIs: a batch whose lines it serves goes to
   * it as one upstream batch (one uploaded input file), instead of line by line. @default false
   */
  batch: z.boolean().default(false),
});

/** An upstream client object of the embedder's (options only: a config file holds no functions). */
const upstreamClient = z.custom<UpstreamClient>(
  (v) => typeof v === 'object' && v !== null && typeof (v as { call?: unknown }).call === 'function',
  { message: 'must be {baseUrl, apiKey}, {simulate: true}, or an object with a call(request) method' },
);

const simulatedUpstream = z.strictObject({
  simulate: z.literal(true),
  /** The wire API the simulator speaks, to try a kind without a provider account. @default "openai" */
  kind,
  /** Delay before a simulated image is returned. @default 1500 */
  imageDelayMs: z.number().int().nonnegative().default(1500),
  /** How long a simulated video job takes to finish. @default 4000 */
  videoDurationMs: z.number().int().nonnegative().default(4000),
  /** Delay between simulated stream chunks. @default 20 */
  chunkDelayMs: z.number().int().nonnegative().default(20),
});

export const upstreamSchema = z.union([simulatedUpstream, httpUpstream, upstreamClient]);
