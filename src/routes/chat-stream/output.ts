/**
 * What a stream produced, for billing: the upstream's usage when it sent it, else the text of
 * every choice counted with the tokenizer, else (nothing produced) the hold is released.
 * Events relayed without parsing are parsed only in that second case.
 */
import { choicesText } from '../../billing/output.js';
import type { Tokenizer } from '../../billing/tokens.js';
import type { ChatBilling, Usage } from '../chat-billing.js';

export interface StreamOutput {
  /** The upstream's usage, once an event carried it. */
  usage: Usage | null;
  /** Adds the text a parsed chunk produced (every kind of output a provider bills). */
  add(chunk: { choices?: unknown }): void;
  /** Keeps an event relayed unparsed; its text is counted only if usage never arrives. */
  defer(data: string | Uint8Array): void;
  /** Settles or releases the call through `billing`. */
  bill(billing: ChatBilling, tokenizer: Tokenizer): void;
}

export function createStreamOutput(): StreamOutput {
  let produced = '';
  /** Events relayed without parsing; parsed only if the produced text has to be counted. */
  const unparsed: Array<string | Uint8Array> = [];

  const output: StreamOutput = {
    usage: null,
    add(chunk) {
      produced += choicesText(chunk?.choices, 'delta');
    },
    defer(data) {
      unparsed.push(data);
    },
    bill(billing, tokenizer) {
      if (output.usage) return billing.finish(output.usage);
      for (const data of unparsed) {
        try {
          output.add(JSON.parse(typeof data === 'string' ? data : Buffer.from(data).toString('utf8')) as { choices?: unknown });
        } catch {
          // Relayed as it came; it carries nothing countable.
        }
      }
      unparsed.length = 0;
      if (produced.length === 0) return billing.finish(null);
      billing.finish({ prompt: billing.promptTokens(), completion: tokenizer.count(produced) }, 'tokenizer');
    },
  };
  return output;
}
