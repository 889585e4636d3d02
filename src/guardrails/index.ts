/**
 * Input guardrails: the configured checks run on the body the upstream would receive (after
 * brand, knowledge and the plugins' rewrites), before the hold is placed. A `redact` guardrail
 * replaces what it finds, and the hold is computed on the redacted body; a `block` guardrail
 * that finds anything refuses the call (400 content_filter) before any model call, so nothing
 * is billed. Guardrails run in the order configured, each on the text the ones before it left.
 */
import { GatewayError } from '../errors.js';
import type { GuardrailConfig } from '../options/guardrails.js';
import { compileGuardrail, type Guardrail } from './guardrail.js';
import { mapPromptTexts, somePromptText } from './texts.js';

export type { Guardrail } from './guardrail.js';

export interface Guardrails {
  /** Whether any guardrail is configured (none: a call pays nothing for them). */
  readonly any: boolean;
  /**
   * The prompt fields of a call of `account` to `model` once the guardrails covering it ran:
   * the same object when none changed anything. Throws 400 content_filter on a block.
   */
  input(account: string, model: string, fields: Record<string, unknown>): Record<string, unknown>;
}

export function createGuardrails(configs: readonly GuardrailConfig[]): Guardrails {
  const all = configs.filter((c) => c.on.includes('input')).map(compileGuardrail);
  return {
    any: all.length > 0,
    input(account, model, fields) {
      let out = fields;
      for (const g of all) {
        if (!g.covers(account, model)) continue;
        if (g.action === 'block') {
          if (somePromptText(out, (t) => g.finds(t))) throw contentFilter(g);
        } else {
          out = mapPromptTexts(out, (t) => g.redact(t));
        }
      }
      return out;
    },
  };
}

/** The refusal of a prompt a guardrail blocked: it names the guardrail, never what it found. */
export function contentFilter(g: Pick<Guardrail, 'id'>): GatewayError {
  return new GatewayError('content_filter', `The request was blocked by the guardrail "${g.id}".`, { metadata: { guardrail: g.id } });
}

/**
 * A media request's fields and bytes once the guardrails ran on its prompt: the client's bytes
 * when nothing changed, else the redacted fields as JSON.
 */
export function guardedBody(
  guardrails: Guardrails,
  account: string,
  model: string,
  fields: Record<string, unknown>,
  bytes: Uint8Array,
): { fields: Record<string, unknown>; bytes: Uint8Array } {
  if (!guardrails.any) return { fields, bytes };
  const guarded = guardrails.input(account, model, fields);
  return guarded === fields ? { fields, bytes } : { fields: guarded, bytes: Buffer.from(JSON.stringify(guarded)) };
}
