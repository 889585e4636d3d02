/**
 * OpenAI chat completions (and legacy completions) answers read into the answer model. The
 * byte-level chat relay keeps its own account (stream/chat-output.ts), which parses only what it
 * must; a translation or the completions stream feeds this one parsed chunks.
 */
import { type AnswerAccount, plainAccount } from '../../billing/answer.js';
import { choicesOutput } from '../../billing/output.js';
import { usageFrom } from '../../billing/usage.js';
import { RunningAccount } from './account.js';

/** A plain chat completion's (or completion's) account. */
export function chatAnswer(body: Record<string, unknown>): AnswerAccount {
  return plainAccount(usageFrom(body.usage), () => choicesOutput(body.choices));
}

/** A chat stream's account, fed each parsed chunk: its choices' output, then its usage report. */
export class ChatAccount extends RunningAccount {
  read(chunk: Record<string, unknown>): void {
    // Only a choice's delta (or text) is output, each choice's in its own run.
    this.add(chunk.choices, choicesOutput);
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    choices.forEach((c: { index?: unknown; finish_reason?: unknown } | null, i) => {
      if (c && typeof c === 'object') this.choice(typeof c.index === 'number' ? c.index : i, typeof c.finish_reason === 'string');
    });
    this.report(usageFrom(chunk.usage));
  }
}
