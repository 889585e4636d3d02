/**
 * The settle rule on accounts whose reports do not cover their output, read without a store:
 * what it bills, and that it never throws on what an upstream may send.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { BilledCall } from '../../src/billing/meter.js';
import { choicesOutput, collectOutput, noOutput, outputTokens } from '../../src/billing/output.js';
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

  it('count as the JSON text the model wrote, base64 it wrote in them included (streamed, the same arguments are tokenized)', () => {
    const args = { numbers: [1, 22, 333], flag: true, none: null, city: 'Paris', nested: { a: [{ b: 'c' }] } };
    const into = noOutput();
    collectOutput({ args }, into);
    expect(into).toEqual({ text: JSON.stringify(args), mediaBytes: 0 });
    const blob = 'QUJD'.repeat(100);
    const withBlob = noOutput();
    collectOutput({ input: { file: blob } }, withBlob);
    expect(withBlob).toEqual({ text: JSON.stringify({ file: blob }), mediaBytes: 0 });
  });
});

describe('chat choices', () => {
  const cfr = { hate: { filtered: false, severity: 'safe' }, violence: { filtered: false, severity: 'safe' } };
  it("count only what a choice's delta, message or text carries, not what describes the choice", () => {
    const streamed = noOutput();
    for (const t of ['Hello', ' there']) choicesOutput([{ index: 0, delta: { content: t }, content_filter_results: cfr, native_finish_reason: null, logprobs: null }], streamed);
    choicesOutput([{ index: 0, delta: {}, finish_reason: 'stop', native_finish_reason: 'end_turn', content_filter_results: cfr }], streamed);
    expect(streamed).toEqual({ text: 'Hello there', mediaBytes: 0 });
    const plain = choicesOutput([{ index: 0, message: { role: 'assistant', content: 'Hello there' }, finish_reason: 'stop', content_filter_results: cfr }]);
    expect(plain).toEqual(streamed);
    expect(choicesOutput([{ index: 0, text: 'Hello there', finish_reason: 'stop', logprobs: null }])).toEqual(streamed);
  });

  it("with n choices, each choice's text is counted on its own: interleaved deltas bill what the plain answer with the same choices bills", () => {
    // Choice 0 says " the" and choice 1 "ory", 200 times, interleaved as a stream sends them:
    // run together they would read " theory" (one token each), not what either choice wrote.
    const streamed = noOutput();
    for (let i = 0; i < 200; i++) {
      choicesOutput([{ index: 0, delta: { content: ' the' } }], streamed);
      choicesOutput([{ index: 1, delta: { content: 'ory' } }], streamed);
    }
    choicesOutput([{ index: 0, delta: {}, finish_reason: 'stop' }, { index: 1, delta: {}, finish_reason: 'stop' }], streamed);
    const plain = choicesOutput([
      { index: 0, message: { role: 'assistant', content: ' the'.repeat(200) }, finish_reason: 'stop' },
      { index: 1, message: { role: 'assistant', content: 'ory'.repeat(200) }, finish_reason: 'stop' },
    ]);
    expect(streamed).toEqual(plain);
    const tokens = (c: ReturnType<typeof noOutput>) => outputTokens(c, (t) => tokenizer.count(t));
    expect(tokens(streamed)).toBe(tokenizer.count(' the'.repeat(200)) + tokenizer.count('ory'.repeat(200)));
    expect(tokens(streamed)).toBe(tokens(plain));
  });

  it('text that looks like base64 is tokenized in a plain answer as in its stream (short deltas); audio data and a data URL are media', () => {
    const blob = Buffer.from(Array.from({ length: 1500 }, (_, i) => (i * 7919) % 256)).toString('base64');
    const plain = choicesOutput([{ index: 0, message: { role: 'assistant', content: blob }, finish_reason: 'stop' }]);
    const streamed = noOutput();
    for (let i = 0; i < blob.length; i += 8) choicesOutput([{ index: 0, delta: { content: blob.slice(i, i + 8) } }], streamed);
    expect(plain).toEqual({ text: blob, mediaBytes: 0 });
    expect(streamed).toEqual(plain);
    expect(outputTokens(plain, (t) => tokenizer.count(t))).toBe(tokenizer.count(blob));
    const spoken = choicesOutput([{ index: 0, message: { role: 'assistant', content: null, audio: { id: 'audio_1', data: blob, transcript: 'Hi' } } }]);
    expect(spoken).toEqual({ text: 'Hi', mediaBytes: blob.length });
    const url = `data:image/png;base64,${blob}`;
    expect(choicesOutput([{ index: 0, message: { role: 'assistant', content: url } }])).toEqual({ text: '', mediaBytes: url.length });
  });

  it("a router's reasoning sent twice in one delta (text and details) counts once; signatures and encrypted reasoning are not output", () => {
    const signature = Buffer.from(Array.from({ length: 600 }, (_, i) => (i * 31) % 256)).toString('base64');
    const streamed = noOutput();
    for (const t of ['Let me', ' think.']) {
      choicesOutput([{ index: 0, delta: { role: 'assistant', content: '', reasoning: t, reasoning_details: [{ type: 'reasoning.text', text: t, format: 'anthropic-claude-v1', index: 0 }] } }], streamed);
    }
    choicesOutput([{ index: 0, delta: { content: '', reasoning: '', reasoning_details: [{ type: 'reasoning.text', text: '', signature, index: 0 }] } }], streamed);
    choicesOutput([{ index: 0, delta: { content: 'Yes.' } }], streamed);
    expect(streamed).toEqual({ text: 'Let me think.Yes.', mediaBytes: 0 });
    const plain = choicesOutput([
      {
        index: 0,
        message: {
          role: 'assistant',
          content: 'Yes.',
          reasoning: 'Let me think.',
          reasoning_details: [
            { type: 'reasoning.text', text: 'Let me think.', signature },
            { type: 'reasoning.encrypted', data: signature },
          ],
        },
      },
    ]);
    expect(outputTokens(plain, (t) => tokenizer.count(t))).toBe(tokenizer.count('Yes.Let me think.'));
    // Details alone (no reasoning text beside them) are the reasoning: counted.
    expect(choicesOutput([{ index: 0, delta: { reasoning_details: [{ type: 'reasoning.summary', summary: 'Thought about it.' }] } }])).toEqual({
      text: 'Thought about it.',
      mediaBytes: 0,
    });
    // Anthropic's thinking block: the thinking is output, its signature is not.
    const into = noOutput();
    collectOutput({ type: 'thinking', thinking: 'Hmm.', signature }, into);
    expect(into).toEqual({ text: 'Hmm.', mediaBytes: 0 });
    // Gemini's signature beside a call or a thought.
    collectOutput({ parts: [{ functionCall: { name: 'f', args: { a: 1 } }, thoughtSignature: signature }] }, into);
    expect(into).toEqual({ text: 'Hmm.f{"a":1}', mediaBytes: 0 });
  });
});
