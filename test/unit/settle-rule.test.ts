/**
 * The settle rule on accounts whose reports do not cover their output, read without a store:
 * what it bills, and that it never throws on what an upstream may send.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { BilledCall } from '../../src/billing/meter.js';
import { collectOutput, noOutput } from '../../src/billing/output.js';
import { settleAnswer } from '../../src/billing/settle.js';
import type { Tokenizer } from '../../src/billing/tokens.js';
import type { LedgerUnits } from '../../src/stores/types.js';
import { GeminiAccount } from '../../src/upstream/answers/gemini.js';
import { messagesAnswer } from '../../src/upstream/answers/messages.js';
import { loadTokenizer } from '../helpers/billing.js';

let tokenizer: Tokenizer;
beforeAll(async () => {
  tokenizer = await loadTokenizer();
});

/** A call that records what the settle did with it. */
function recording(): BilledCall & { billed: LedgerUnits | null; cancelled: boolean } {
  const call = {
    id: 'req_1',
    accountId: 'a',
    held: 0n,
    closed: false,
    billed: null as LedgerUnits | null,
    cancelled: false,
    async bill(units: LedgerUnits) {
      call.billed = units;
    },
    async cancel() {
      call.cancelled = true;
    },
    onAbort() {},
  };
  return call;
}

const end = (complete: boolean) => ({ complete, cause: 'stopped' as const, upstream: 'u', promptTokens: () => 10, tokenizer });

describe('a Gemini stream cut while its running reports count only its thinking', () => {
  it('bills no less than what it produced', async () => {
    const thought = 'Considering the tides and the moon. '.repeat(100);
    const a = new GeminiAccount();
    // Running reports without candidatesTokenCount or thoughtsTokenCount, as Gemini sends them mid-stream.
    a.read({ candidates: [{ index: 0, content: { parts: [{ text: thought, thought: true }] } }], usageMetadata: { promptTokenCount: 10, totalTokenCount: 10 } });
    a.read({ candidates: [{ index: 0, content: { parts: [{ text: 'Hello there' }] } }], usageMetadata: { promptTokenCount: 10, totalTokenCount: 10 } });
    const call = recording();
    await settleAnswer(call, a, end(false));
    expect((call.billed as { completion: number }).completion).toBe(tokenizer.count(thought + 'Hello there'));
  });
});

describe('tool-call arguments nested deeper than any answer', () => {
  it('are counted to a depth, never throwing: the call is billed', async () => {
    let deep: Record<string, unknown> = { leaf: 'x' };
    for (let i = 0; i < 10_000; i++) deep = { d: deep };
    const into = noOutput();
    expect(() => collectOutput({ input: deep }, into)).not.toThrow();
    expect(into.text.length).toBeGreaterThan(0);
    const call = recording();
    await settleAnswer(call, messagesAnswer({ content: [{ type: 'tool_use', id: 't', name: 'f', input: deep }] }), end(true));
    expect((call.billed as { completion: number }).completion).toBeGreaterThan(0);
  });

  it('count as the JSON text the model wrote, an encoded blob in them as media', () => {
    const args = { numbers: [1, 22, 333], flag: true, none: null, city: 'Paris', nested: { a: [{ b: 'c' }] } };
    const into = noOutput();
    collectOutput({ args }, into);
    expect(into).toEqual({ text: JSON.stringify(args), mediaBytes: 0 });
    const blob = 'QUJD'.repeat(100);
    const withBlob = noOutput();
    collectOutput({ input: { file: blob } }, withBlob);
    expect(withBlob).toEqual({ text: '{"file":}', mediaBytes: blob.length });
  });
});
