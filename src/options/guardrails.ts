/**
 * Guardrails in the options: checks on what a prompt carries before it leaves for a provider,
 * and on what an answer carries before the client sees it. Each has an id (named in the
 * refusal and the logs), a kind, when it runs (`on`), and the calls it covers: models (exact
 * ids or a prefix ending in `*`) and accounts, both all when absent.
 */
import { z } from 'zod';
import { decimalPrice, entityId, modelPattern } from './values.js';

/** The personal data a `pii` guardrail finds, each with a check beyond its shape where one exists. */
export const PII_ENTITIES = ['email', 'phone', 'credit_card', 'iban', 'ssn', 'ip_address'] as const;
export type PiiEntity = (typeof PII_ENTITIES)[number];

/**
 * A pattern a `regex` guardrail looks for: it must compile, and must not match the empty text
 * (it would then match between every two characters, blocking every prompt).
 */
const pattern = z
  .string()
  .min(1)
  .superRefine((source, ctx) => {
    let re: RegExp;
    try {
      re = new RegExp(source, 'u');
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: `is not a valid regular expression (${(err as Error).message})` });
      return;
    }
    if (re.test('')) ctx.addIssue({ code: 'custom', message: 'matches the empty text; a pattern must match at least one character' });
  });

const scope = {
  id: entityId,
  /** When it runs: on the prompt ("input"), on the answer's text ("output"), or both. @default ["input"] */
  on: z.array(z.enum(['input', 'output'])).min(1).default(['input']),
  /** Models it covers: exact ids or a prefix ending in `*`. @default null (all) */
  models: z.array(modelPattern).nullable().default(null),
  /** Accounts it covers, by id. @default null (all) */
  accounts: z.array(entityId).nullable().default(null),
};

export const guardrailSchema = z.discriminatedUnion('kind', [
  z.strictObject({
    ...scope,
    kind: z.literal('pii'),
    /** What it finds. @default every entity */
    entities: z.array(z.enum(PII_ENTITIES)).min(1).default([...PII_ENTITIES]),
    /** `redact` replaces each match with `[REDACTED:<ENTITY>]`; `block` refuses the call. */
    action: z.enum(['redact', 'block']),
  }),
  z.strictObject({
    ...scope,
    kind: z.literal('regex'),
    /** JavaScript regular expressions (Unicode mode), matched anywhere in the prompt's text. */
    patterns: z.array(pattern).min(1),
    /** Case-insensitive matching. @default false */
    ignoreCase: z.boolean().default(false),
    /**
     * The most characters a match of an unbounded pattern (`+`, `*`, `{n,}`) spans: what a
     * stream holds back for it. A bounded pattern's own span is computed. @default 256
     */
    maxSpan: z.number().int().min(1).max(4096).optional(),
    /** `block` refuses the call; `redact` replaces each match with `[REDACTED]`. */
    action: z.enum(['block', 'redact']),
  }),
  z.strictObject({
    ...scope,
    kind: z.literal('moderation'),
    /** The upstream (its id in `upstreams`) whose OpenAI-shaped `/moderations` judges the text. */
    upstream: entityId,
    /** The moderation model asked for. */
    model: z.string().min(1),
    /** What one check costs the account, in USD (a decimal string). @default "0" */
    priceUsd: decimalPrice.default('0'),
    /** How long a check may take before the guardrail counts as unable to answer. @default 5000 */
    timeoutMs: z.number().int().min(1).max(120_000).default(5000),
    /** Let the call through when the check cannot answer (down, erroring, slow). @default false: fail closed */
    failOpen: z.boolean().default(false),
    /** A flagged text is refused: the only action. @default "block" */
    action: z.literal('block').default('block'),
  }),
]);

export type GuardrailConfig = z.output<typeof guardrailSchema>;
