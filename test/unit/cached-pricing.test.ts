/**
 * The cost of cached and reasoning tokens: a property test of the arithmetic against the rule
 * written out independently (uncached prompt, cache reads, cache writes and completion, each
 * at its price, summed exactly in pico-USD and rounded up to the nano-USD once), and how an
 * upstream's `usage` details become the parts a call is billed on.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Model } from '../../src/catalog/catalog.js';
import { listCost } from '../../src/billing/pricing.js';
import { usageFrom, usageOf, usageOfParts } from '../../src/billing/usage.js';

const textModel = (promptPico: bigint, completionPico: bigint, cachedPromptPico: bigint, cacheWritePico: bigint) =>
  ({ id: 'm', text: { promptPico, completionPico, cachedPromptPico, cacheWritePico, cacheWrite1hPico: 2n * promptPico } }) as unknown as Model;

/** Pico-USD prices up to 1 USD a token (12 decimal places, like a configured price). */
const price = fc.bigInt({ min: 0n, max: 1_000_000_000_000n });
const count = fc.integer({ min: 0, max: 2_000_000 });

describe('the cost of a call with cache reads, cache writes and reasoning', () => {
  it('is each part at its price, summed exactly, rounded up once', () => {
    fc.assert(
      fc.property(price, price, price, price, count, count, count, count, count, (p, o, c, w, uncached, cached, written, completion, reasoning) => {
        const units = { kind: 'tokens' as const, prompt: uncached + cached + written, completion: completion + reasoning, cachedPrompt: cached, cacheWrite: written, reasoning };
        const pico = p * BigInt(uncached) + c * BigInt(cached) + w * BigInt(written) + o * BigInt(completion + reasoning);
        const nano = listCost(textModel(p, o, c, w), units);
        // Rounded up: never below the exact amount, less than one nano-USD above it.
        expect(nano * 1000n >= pico).toBe(true);
        expect(nano * 1000n - pico < 1000n).toBe(true);
      }),
    );
  });

  it('without cache prices (they default to the prompt price) splitting the prompt changes nothing', () => {
    fc.assert(
      fc.property(price, price, count, count, count, count, (p, o, prompt, a, b, completion) => {
        const cached = Math.min(a, prompt);
        const written = Math.min(b, prompt - cached);
        const model = textModel(p, o, p, p);
        const split = listCost(model, { kind: 'tokens', prompt, completion, cachedPrompt: cached, cacheWrite: written });
        expect(split).toBe(listCost(model, { kind: 'tokens', prompt, completion }));
      }),
    );
  });

  it('reasoning tokens are inside the completion: naming them adds nothing', () => {
    fc.assert(
      fc.property(price, price, count, count, (p, o, prompt, completion) => {
        const model = textModel(p, o, p, p);
        const reasoning = Math.floor(completion / 2);
        expect(listCost(model, { kind: 'tokens', prompt, completion, reasoning })).toBe(listCost(model, { kind: 'tokens', prompt, completion }));
      }),
    );
  });

  it('refuses units whose cache parts exceed the prompt (the billed call then charges its hold)', () => {
    expect(() => listCost(textModel(1n, 1n, 1n, 1n), { kind: 'tokens', prompt: 10, completion: 0, cachedPrompt: 8, cacheWrite: 3 })).toThrow(RangeError);
  });
});

describe('usage details read from the wire', () => {
  it('chat: cache reads, cache writes and reasoning from the *_details objects', () => {
    expect(
      usageFrom({
        prompt_tokens: 100,
        completion_tokens: 40,
        prompt_tokens_details: { cached_tokens: 60, cache_write_tokens: 30, audio_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 25 },
      }),
    ).toEqual({ prompt: 100, completion: 40, cachedPrompt: 60, cacheWrite: 30, reasoning: 25 });
  });

  it('Responses: input_tokens_details and output_tokens_details', () => {
    expect(
      usageOf({ input_tokens: 100, output_tokens: 5, input_tokens_details: { cached_tokens: 64 }, output_tokens_details: { reasoning_tokens: 2 } }, 'input_tokens', 'output_tokens'),
    ).toEqual({ prompt: 100, completion: 5, cachedPrompt: 64, reasoning: 2 });
  });

  it('zero, missing or malformed details are no parts; the counts still bill', () => {
    expect(usageFrom({ prompt_tokens: 9, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 0 } })).toEqual({ prompt: 9, completion: 3 });
    expect(usageFrom({ prompt_tokens: 9, completion_tokens: 3, prompt_tokens_details: null })).toEqual({ prompt: 9, completion: 3 });
    expect(usageFrom({ prompt_tokens: 9, completion_tokens: 3, prompt_tokens_details: { cached_tokens: -4, cache_write_tokens: '7' } })).toEqual({ prompt: 9, completion: 3 });
    expect(usageFrom({ prompt_tokens: 9, completion_tokens: 3, completion_tokens_details: { reasoning_tokens: 1.5 } })).toEqual({ prompt: 9, completion: 3 });
    expect(usageFrom({ prompt_tokens: 'nine', completion_tokens: 3, prompt_tokens_details: { cached_tokens: 4 } })).toBeNull();
  });

  it('cache parts larger than the prompt they belong to are billed in full: the prompt is read as their sum', () => {
    expect(usageFrom({ prompt_tokens: 50, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 40, cache_write_tokens: 30 } })).toEqual({
      prompt: 70,
      completion: 1,
      cachedPrompt: 40,
      cacheWrite: 30,
    });
  });

  it('embeddings (no completion field) read the prompt parts too', () => {
    expect(usageOf({ prompt_tokens: 12, prompt_tokens_details: { cached_tokens: 4 } }, 'prompt_tokens', null)).toEqual({ prompt: 12, completion: 0, cachedPrompt: 4 });
  });

  it('usageOfParts (for providers that report parts apart) drops zero parts and keeps parts inside the prompt', () => {
    expect(usageOfParts({ prompt: 10, completion: 2, cachedPrompt: 0, cacheWrite: 0, reasoning: 0 })).toEqual({ prompt: 10, completion: 2 });
    expect(usageOfParts({ prompt: 5, completion: 2, cachedPrompt: 4, cacheWrite: 3 })).toEqual({ prompt: 7, completion: 2, cachedPrompt: 4, cacheWrite: 3 });
  });
});
