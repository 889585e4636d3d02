/**
 * The input guardrails on a token-priced call's plan: they run on the body the upstream would
 * receive (the plugins' replacement when there is one), and a body they changed becomes the
 * replacement the hold is computed on. Every other target of the model (a fallback) gets its
 * fields with the same redactions.
 */
import type { TextPlan } from '../operations/types.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Guardrails } from './index.js';

export async function guardPlan(
  guardrails: Guardrails,
  ctx: RequestContext,
  path: string,
  plan: TextPlan,
  replaced: Record<string, unknown> | null,
): Promise<{ plan: TextPlan; replaced: Record<string, unknown> | null }> {
  if (!guardrails.any) return { plan, replaced };
  const sent = replaced ?? plan.fields(plan.model);
  const checked = await guardrails.input(ctx, plan.model, path, sent);
  if (checked.fields === sent) return { plan, replaced };
  const fields = (served: Parameters<TextPlan['fields']>[0]) => checked.redact(plan.fields(served));
  return { plan: { ...plan, fields, unchanged: false }, replaced: checked.fields };
}
