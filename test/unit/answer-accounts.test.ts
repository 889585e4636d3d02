/**
 * When each wire format's stream account says the answer's content ended (`answered`): the
 * moment a client that leaves still pays the usage that follows, so the relay reads on for it.
 * Too early would bill a leaving client for output it never got; too late would let the
 * usage go unread.
 */
import { describe, expect, it } from 'vitest';
import { finalUsage, plainAccount } from '../../src/billing/answer.js';
import { outputTokens } from '../../src/billing/output.js';
import { ChatAccount } from '../../src/upstream/answers/chat.js';
import { GeminiAccount, geminiAnswerAccount } from '../../src/upstream/answers/gemini.js';
import { MessagesAccount, messagesAnswer } from '../../src/upstream/answers/messages.js';

const delta = (index: number, content: string, finish: string | null = null) => ({ index, delta: { content }, finish_reason: finish });
const candidate = (index: number, text: string, finishReason?: string) => ({ index, content: { role: 'model', parts: [{ text }] }, ...(finishReason ? { finishReason } : {}) });

describe('ChatAccount.answered', () => {
  it('is false until a finish_reason string comes (null is no finish), then true before the usage chunk', () => {
    const a = new ChatAccount();
    a.read({ choices: [delta(0, 'Hi')] });
    a.read({ choices: [{ index: 0, delta: {}, finish_reason: null }] });
    expect(a.answered()).toBe(false);
    a.read({ choices: [delta(0, '', 'stop')] });
    expect(a.answered()).toBe(true);
    a.read({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
    expect(a.answered()).toBe(true);
  });

  it('with several choices, only once every choice seen has finished', () => {
    const a = new ChatAccount();
    a.read({ choices: [delta(0, 'A'), delta(1, 'B')] });
    a.read({ choices: [delta(0, '', 'stop')] });
    expect(a.answered()).toBe(false);
    a.read({ choices: [delta(1, 'B more')] });
    expect(a.answered()).toBe(false);
    a.read({ choices: [delta(1, '', 'length')] });
    expect(a.answered()).toBe(true);
  });
});

describe('GeminiAccount.answered', () => {
  it('is true at the event whose candidate carries a finishReason, with or without its usage', () => {
    const a = new GeminiAccount();
    a.read({ candidates: [candidate(0, 'Hel')] });
    expect(a.answered()).toBe(false);
    a.read({ candidates: [candidate(0, 'lo', 'STOP')] });
    expect(a.answered()).toBe(true);
  });

  it('with several candidates (candidateCount), only once every candidate seen has finished', () => {
    const a = new GeminiAccount();
    a.read({ candidates: [candidate(0, 'A'), candidate(1, 'B')] });
    a.read({ candidates: [candidate(0, '.', 'STOP')] });
    expect(a.answered()).toBe(false);
    a.read({ candidates: [candidate(1, '.', 'MAX_TOKENS')] });
    expect(a.answered()).toBe(true);
  });

  it("counts each candidate's text on its own, streamed (interleaved) as plain", () => {
    const a = new GeminiAccount();
    for (let i = 0; i < 3; i++) a.read({ candidates: [candidate(0, ' the'), candidate(1, 'ory')] });
    a.read({ candidates: [candidate(0, '', 'STOP'), candidate(1, '', 'STOP')] });
    const plain = geminiAnswerAccount({ candidates: [candidate(0, ' the the the', 'STOP'), candidate(1, 'oryoryory', 'STOP')] });
    expect(a.output()).toEqual({ text: ' the the the', mediaBytes: 0, more: new Map([[1, 'oryoryory']]) });
    expect(plain.output()).toEqual(a.output());
  });

  it('a blocked prompt (no candidate) ends the content', () => {
    const a = new GeminiAccount();
    a.read({ promptFeedback: { blockReason: 'SAFETY' } });
    expect(a.answered()).toBe(true);
  });
});

describe('Gemini usage without candidatesTokenCount', () => {
  // Gemini leaves the count out when nothing visible was written: with visible output, a report
  // that counts only the thoughts leaves that output out (the settle bills it on top, counted).
  const thoughtsOnly = { promptTokenCount: 10, thoughtsTokenCount: 5 };
  const visible = 'A long visible answer';
  it('a stream whose last report leaves it out after visible text leaves that text unreported; one that counts it does not', () => {
    const a = new GeminiAccount();
    a.read({ candidates: [{ index: 0, content: { parts: [{ text: 'hmm', thought: true }] } }] });
    a.read({ candidates: [candidate(0, visible, 'STOP')], usageMetadata: thoughtsOnly });
    expect(a.usage).toMatchObject({ prompt: 10, completion: 5 });
    // The thought's own text is in the report's thinking: only the visible text is left out.
    expect(a.unreported()).toEqual({ text: visible, mediaBytes: 0 });
    expect(finalUsage(a)).toBeNull();
    const b = new GeminiAccount();
    b.read({ candidates: [candidate(0, visible, 'STOP')], usageMetadata: { ...thoughtsOnly, candidatesTokenCount: 4 } });
    expect(b.unreported()).toEqual({ text: '', mediaBytes: 0 });
    expect(finalUsage(b)).toMatchObject({ completion: 9 });
    // Only thoughts written: leaving the count out is Gemini's way of saying zero.
    const c = new GeminiAccount();
    c.read({ candidates: [{ index: 0, content: { parts: [{ text: 'hmm', thought: true }] }, finishReason: 'STOP' }], usageMetadata: thoughtsOnly });
    expect(c.unreported()).toEqual({ text: '', mediaBytes: 0 });
  });

  it('a report the settle would not take as final is not kept for the cache either', () => {
    const plain = (usage: { prompt: number; completion: number }) => plainAccount(usage, () => ({ text: 'written', mediaBytes: 0 }));
    expect(finalUsage(plain({ prompt: 5, completion: 3 }))).toMatchObject({ prompt: 5, completion: 3 });
    expect(finalUsage(plain({ prompt: 0, completion: 3 }))).toBeNull();
    expect(finalUsage(plain({ prompt: 5, completion: 0 }))).toBeNull();
  });

  it('a plain answer likewise', () => {
    const answer = (usageMetadata: object) => geminiAnswerAccount({ candidates: [candidate(0, visible, 'STOP')], usageMetadata });
    expect(answer(thoughtsOnly).unreported?.()).toEqual({ text: visible, mediaBytes: 0 });
    expect(answer({ ...thoughtsOnly, candidatesTokenCount: 4 }).unreported?.()).toBeUndefined();
  });
});

describe('MessagesAccount.answered', () => {
  it('is false through the content blocks and a message_delta without a stop_reason, true at the one with it', () => {
    const a = new MessagesAccount();
    a.read({ type: 'message_start', message: { usage: { input_tokens: 5, output_tokens: 1 } } });
    a.read({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    a.read({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } });
    a.read({ type: 'content_block_stop', index: 0 });
    a.read({ type: 'message_delta', delta: { stop_reason: null }, usage: { output_tokens: 1 } });
    expect(a.answered()).toBe(false);
    a.read({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 2 } });
    expect(a.answered()).toBe(true);
  });
});

describe('MessagesAccount.output', () => {
  it('a thinking block counts its thinking, not the signature that vouches for it (a stream cut before any usage)', () => {
    const signature = 'EqQBCkgIARABGAIiQL'.repeat(70);
    const read = (withSignature: boolean) => {
      const a = new MessagesAccount();
      a.read({ type: 'message_start', message: { usage: { input_tokens: 100, output_tokens: 1 } } });
      a.read({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } });
      a.read({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Let me think.' } });
      if (withSignature) a.read({ type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature } });
      a.read({ type: 'content_block_stop', index: 0 });
      a.read({ type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } });
      a.read({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Hello there.' } });
      return a.output();
    };
    expect(read(true)).toEqual(read(false));
    expect(read(true)).toEqual({ text: 'Let me think.Hello there.', mediaBytes: 0 });
    // And a whole thinking block carrying its signature (a plain answer's content).
    const whole = new MessagesAccount();
    whole.read({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: 'Hmm.', signature } });
    expect(outputTokens(whole.output(), (t) => t.length)).toBe(4);
    // A plain Message (read when it reports no usage) likewise; a tool's input keeps every field.
    const plain = messagesAnswer({ content: [{ type: 'thinking', thinking: 'Hmm.', signature }, { type: 'tool_use', id: 't1', name: 'sign', input: { signature: 'Ann' } }] });
    expect(plain.output()).toEqual({ text: 'Hmm.sign{"signature":"Ann"}', mediaBytes: 0 });
  });
});
