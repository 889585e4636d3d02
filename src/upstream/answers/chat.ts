/**
 * OpenAI chat completions (and legacy completions) answers read into the answer model. A
 * stream's chunks are read by `createStreamOutput` (stream/chat-output.ts), which the byte-level
 * relay feeds without parsing what it need not; a translation feeds it parsed chunks.
 */
import { type AnswerAccount, plainAccount } from '../../billing/answer.js';
import { choicesOutput } from '../../billing/output.js';
import { usageFrom } from '../../billing/usage.js';
import { createStreamOutput, type StreamOutput } from '../stream/chat-output.js';

/** A plain chat completion's (or completion's) account. */
export function chatAnswer(body: Record<string, unknown>): AnswerAccount {
  return plainAccount(usageFrom(body.usage), () => choicesOutput(body.choices));
}

/** A chat stream's account for a translation, fed each parsed chunk. */
export class ChatAccount {
  private readonly out: StreamOutput = createStreamOutput();
  readonly account: AnswerAccount;

  constructor() {
    const out = this.out;
    this.account = {
      get usage() {
        return out.usage;
      },
      output: () => out.produced().output(),
      outputAfterUsage: () => out.produced().outputAfterUsage?.() === true,
    };
  }

  read(chunk: Record<string, unknown>): void {
    this.out.add(chunk);
    const usage = usageFrom(chunk.usage);
    if (usage) this.out.report(usage);
  }
}
