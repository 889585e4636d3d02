/**
 * The expected numbers of chat billing, computed with the functions src/routes/chat.ts uses
 * (the same tokenizer, prompt estimate and exact money), at the test model's prices.
 */
import { createTokenizer, estimatePromptTokens, promptTokensBound, type Tokenizer } from '../../src/billing/tokens.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import type { SettleRequest } from '../../src/stores/types.js';
import { COMPLETION_PRICE, PROMPT_PRICE } from './gateway.js';

export const PROMPT_PICO = parsePrice(PROMPT_PRICE);
export const COMPLETION_PICO = parsePrice(COMPLETION_PRICE);

let tokenizer: Tokenizer | undefined;

/** The real tokenizer (o200k_base), loaded. */
export async function loadTokenizer(): Promise<Tokenizer> {
  tokenizer ??= createTokenizer();
  await tokenizer.ready;
  // Loaded means a real count: "hello world" is 2 tokens, not its 11 bytes.
  if (tokenizer.count('hello world') !== 2) throw new Error('gpt-tokenizer did not load');
  return tokenizer;
}

/** List-price cost (nano-USD) of `prompt` + `completion` tokens at the test model's prices. */
export function chatCost(prompt: number, completion: number): bigint {
  return costOf([
    [PROMPT_PICO, prompt],
    [COMPLETION_PICO, completion],
  ]);
}

/** The prompt estimate the gateway computes for `messages`. */
export async function promptEstimate(messages: unknown[]): Promise<number> {
  return estimatePromptTokens(await loadTokenizer(), { messages });
}

/** The byte bound of the prompt the gateway places its first hold on. */
export function promptBound(messages: unknown[]): number {
  return promptTokensBound({ messages });
}

/**
 * The worst-case hold (nano-USD) the gateway places for a chat with `messages` and `maxTokens`
 * when the wallet affords it: on the prompt's byte bound.
 */
export async function worstCaseHold(messages: unknown[], maxTokens: number): Promise<bigint> {
  return chatCost(promptBound(messages), maxTokens);
}

/**
 * The charges of a ledger: its entries without the credits (opening balances, top-ups and
 * credits are ledger entries too, with negative costs), for tests about what calls were billed.
 */
export async function chargesOf<E extends { units: { kind: string } }>(entries: Promise<E[]> | E[]): Promise<E[]> {
  return (await entries).filter((e) => e.units.kind !== 'credit');
}

/**
 * A settle request of account `acct`, key `key`, model `m` (1 prompt, 2 completion tokens) for
 * `holdId` at `cost` nano-USD: what the settle journal and the settle writer keep.
 */
export function settleRequest(holdId: string, cost: bigint, at = Date.UTC(2026, 10, 5)): SettleRequest {
  return {
    holdId,
    accountId: 'acct',
    month: '2026-11',
    cost,
    entry: { id: holdId, accountId: 'acct', keyId: 'key', model: 'm', units: { kind: 'tokens', prompt: 1, completion: 2 }, measured: 'usage', at },
  };
}

