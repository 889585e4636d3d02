/**
 * A batch line is billed at the prices its batch held it at: the text prices per token and
 * the hosted tools' per call, kept on the batch record when it was created, whatever the model
 * costs when the line runs. A batch created before the record kept them is billed at the
 * model's prices then.
 */
import { describe, expect, it } from 'vitest';
import { heldPricesOf, lineCall } from '../../src/billing/batch.js';
import type { BillingDoor } from '../../src/billing/billed-call.js';
import type { Model } from '../../src/catalog/catalog.js';

const text = (x: bigint) => ({ promptPico: x, completionPico: 2n * x, cachedPromptPico: x, cacheWritePico: x, cacheWrite1hPico: 2n * x });
const then = { id: 'm', text: text(1_000n), toolPrices: new Map([['web_search', 10_000n]]) } as unknown as Model;
const now = { id: 'm', text: text(10_000n), toolPrices: new Map([['web_search', 99_000n], ['file_search', 5_000n]]) } as unknown as Model;

/** The model a line's call is billed with. */
function billedWith(prices: Record<string, ReturnType<typeof heldPricesOf>> | undefined): Model {
  let seen: Model | undefined;
  const resume = (req: { model: Model }) => {
    seen = req.model;
    return {};
  };
  const door = { meter: { resume } } as unknown as BillingDoor;
  lineCall(door, { id: 'batch_1', accountId: 'a', keyId: 'k', ...(prices ? { prices: prices as never } : {}) }, 'c1', now);
  return seen!;
}

describe('a batch line is billed', () => {
  it('at the text and tool prices its batch was created with', () => {
    const model = billedWith({ m: heldPricesOf(then) });
    expect(model.text).toEqual(then.text);
    expect([...(model.toolPrices ?? [])]).toEqual([['web_search', 10_000n]]);
  });
  it("at the model's prices now when its batch kept none", () => {
    const model = billedWith(undefined);
    expect(model.text).toEqual(now.text);
    expect(model.toolPrices).toBe(now.toolPrices);
  });
});
