/**
 * What the guardrails did, where it is told: the request's record (its access line, metrics
 * and span name each guardrail that acted, and how) and, for a block, this instance's list of
 * recent blocks (the admin API and the console show it). The list is kept in memory, the last
 * `RECENT_BLOCKS` only: it is for an operator looking now, the access lines are the record.
 */
import type { GuardrailAction } from '../observability/record.js';
import type { RequestContext } from '../pipeline/types.js';

export const RECENT_BLOCKS = 200;

export interface GuardrailBlock {
  /** ISO 8601. */
  at: string;
  guardrail: string;
  /** Whether the prompt or the answer was blocked. */
  on: 'input' | 'output';
  requestId: string;
  account: string;
  key: string;
  model: string;
  path: string;
}

export class BlockLog {
  private readonly ring: GuardrailBlock[] = [];
  private next = 0;

  add(block: GuardrailBlock): void {
    if (this.ring.length < RECENT_BLOCKS) this.ring.push(block);
    else this.ring[this.next] = block;
    this.next = (this.next + 1) % RECENT_BLOCKS;
  }

  /** Newest first, at most `limit`, of `account` only when given. */
  list(limit = RECENT_BLOCKS, account?: string): GuardrailBlock[] {
    const n = this.ring.length;
    const out: GuardrailBlock[] = [];
    for (let i = 1; i <= n && out.length < limit; i++) {
      const b = this.ring[(this.next - i + n) % n]!;
      if (account === undefined || b.account === account) out.push(b);
    }
    return out;
  }
}

/** Names a guardrail that acted on the request's record (and a block in the recent blocks). */
export function acted(
  ctx: RequestContext,
  id: string,
  action: GuardrailAction['action'],
  where: { on: 'input' | 'output'; model: string; path: string; blocks: BlockLog },
): void {
  const record = ctx.observed.record;
  (record.guardrails ??= []).push(where.on === 'output' ? { id, action, on: 'output' } : { id, action });
  if (action !== 'block') return;
  where.blocks.add({
    at: new Date().toISOString(),
    guardrail: id,
    on: where.on,
    requestId: ctx.requestId,
    account: ctx.key.accountId,
    key: ctx.key.id,
    model: where.model,
    path: where.path,
  });
}
