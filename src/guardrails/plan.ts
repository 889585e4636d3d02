/**
 * The input guardrails on a token-priced call's plan: they run on the body the upstream would
 * receive (the plugins' replacement when there is one), and a body they changed becomes the
 * replacement the hold is computed on. Every other target of the model (a fallback) gets its
 * fields through the same guardrails.
 */
import type { TextPlan } from '../operations/types.js';
import type { Guardrails } from './index.js';

export function guardPlan(
  guardrails: Guardrails,
  account: string,
  plan: TextPlan,
  replaced: Record<string, unknown> | null,
): { plan: TextPlan; replaced: Record<string, unknown> | null } {
  if (!guardrails.any) return { plan, replaced };
  const sent = replaced ?? plan.fields(plan.model);
  const guarded = guardrails.input(account, plan.model.id, sent);
  if (guarded === sent) return { plan, replaced };
  const fields = (served: Parameters<TextPlan['fields']>[0]) => guardrails.input(account, plan.model.id, plan.fields(served));
  return { plan: { ...plan, fields, unchanged: false }, replaced: guarded };
}
