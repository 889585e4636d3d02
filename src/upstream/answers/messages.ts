/**
 * Anthropic Messages answers read into the answer model. `message_start` reports the input (and
 * its cache reads and writes) with an opening output count; `message_delta` reports the output
 * as a running total. The opening count is not final: when no later report gives one, the
 * produced output is counted.
 */
import { type AnswerAccount, plainAccount } from '../../billing/answer.js';
import { collectOutput, noOutput } from '../../billing/output.js';
import { isCount, type Usage, usageOfParts } from '../../billing/usage.js';
import { isObject } from '../kinds/shared.js';
import { RunningAccount } from './account.js';


/**
 * Messages usage as the gateway's: the prompt is every input token (Anthropic reports cache
 * reads and writes beside `input_tokens`, not in it), and the cached and written parts are
 * named. Null when no input was reported (a prompt is never zero tokens) or a count is malformed.
 */
export function messagesUsage(value: unknown): Usage | null {
  if (!isObject(value)) return null;
  if (!isCount(value.input_tokens) || !isCount(value.output_tokens)) return null;
  const cachedPrompt = isCount(value.cache_read_input_tokens) ? value.cache_read_input_tokens : 0;
  const cacheWrite = isCount(value.cache_creation_input_tokens) ? value.cache_creation_input_tokens : 0;
  // Writes that live an hour are billed at their own price: Anthropic names them in `cache_creation`.
  const creation = isObject(value.cache_creation) ? value.cache_creation : {};
  const cacheWrite1h = isCount(creation.ephemeral_1h_input_tokens) ? creation.ephemeral_1h_input_tokens : 0;
  const prompt = value.input_tokens + cachedPrompt + cacheWrite;
  if (prompt === 0) return null;
  return usageOfParts({ prompt, completion: value.output_tokens, cachedPrompt, cacheWrite, cacheWrite1h });
}

/**
 * A content block or delta as output: a thinking block's `signature` (and a `signature_delta`)
 * only vouches for the thinking, for the next turn (hundreds of base64 bytes): it is not output,
 * as OpenAI's encrypted reasoning and Gemini's thought signatures are not.
 */
function outputOf(block: unknown): unknown {
  if (!isObject(block) || !('signature' in block) || (block.type !== 'thinking' && block.type !== 'signature_delta')) return block;
  const { signature: _signature, ...rest } = block;
  return rest;
}

/** A plain Message's account. */
export function messagesAnswer(body: Record<string, unknown>): AnswerAccount {
  return plainAccount(messagesUsage(body.usage), () => {
    const into = noOutput();
    collectOutput(Array.isArray(body.content) ? body.content.map(outputOf) : body.content, into);
    return into;
  });
}

/** A Messages stream's account, fed each parsed event. */
export class MessagesAccount extends RunningAccount {
  /** The usage so far: `message_start`'s, with each `message_delta`'s reported fields over it. */
  private readonly fields: Record<string, unknown> = {};

  read(event: Record<string, unknown>): void {
    switch (event.type) {
      case 'message_start': {
        const message = isObject(event.message) ? event.message : {};
        if (isObject(message.usage)) Object.assign(this.fields, message.usage);
        // An opening report: its input is the prompt's, but its output count (1, say) counts
        // nothing yet: read as 0, so an answer that fails before any output bills no output.
        this.report(messagesUsage({ ...this.fields, output_tokens: 0 }));
        break;
      }
      case 'content_block_start':
        this.add(outputOf(event.content_block));
        break;
      case 'content_block_delta':
        this.add(outputOf(event.delta));
        break;
      case 'message_delta': {
        const reported = isObject(event.usage) ? event.usage : {};
        for (const k in reported) if (reported[k] !== null && reported[k] !== undefined) this.fields[k] = reported[k];
        if (isObject(event.delta) && event.delta.stop_reason) this.contentEnded();
        // Only a report that counts the output is an account of it.
        if (isCount(reported.output_tokens)) this.report(messagesUsage(this.fields));
        break;
      }
    }
  }
}
