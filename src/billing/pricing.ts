/**
 * The list price of what a call used, in one place for every endpoint: a new endpoint says
 * which units it bills, and its cost comes from here. Exact: pico-USD prices times whole
 * units, rounded up to the nano-USD once per call.
 */
import type { Model } from '../catalog/catalog.js';
import { cost, costOf } from './money.js';
import type { LedgerUnits } from '../stores/types.js';

/** The per-unit price (pico-USD) of a media tier: the tier's own, else the model's `from` price. */
export function tierPrice(model: Model, tier: string): bigint {
  const media = model.media;
  if (!media) throw new RangeError(`model ${model.id} has no media pricing`);
  return media.tiers.get(tier) ?? media.fromPico;
}

/** List cost (nano-USD) of `units` on `model`. */
export function listCost(model: Model, units: LedgerUnits): bigint {
  switch (units.kind) {
    case 'tokens': {
      const text = model.text;
      if (!text) throw new RangeError(`model ${model.id} has no token pricing`);
      // Cache reads and writes are parts of the prompt, each at its own price; the rest of
      // the prompt is at the prompt price. Reasoning is a part of the completion: not added.
      const cached = units.cachedPrompt ?? 0;
      const written = units.cacheWrite ?? 0;
      // Hour-long writes are a part of the writes, at their own price (twice the prompt's by default).
      const writtenHour = Math.min(units.cacheWrite1h ?? 0, written);
      const uncached = units.prompt - cached - written;
      if (uncached < 0) throw new RangeError(`cache reads and writes exceed the prompt of ${units.prompt} tokens`);
      const parts: Array<[bigint, number]> = [
        [text.promptPico, uncached],
        [text.cachedPromptPico, cached],
        [text.cacheWritePico, written - writtenHour],
        [text.cacheWrite1hPico, writtenHour],
        [text.completionPico, units.completion],
      ];
      // Hosted tool calls are priced per call; a call of a tool the model does not price is
      // never counted (its request is refused), so a missing price here is a program error.
      for (const [tool, calls] of Object.entries(units.tools ?? {})) {
        const price = model.toolPrices?.get(tool);
        if (price === undefined) throw new RangeError(`model ${model.id} has no price for the tool ${tool}`);
        parts.push([price, calls]);
      }
      return costOf(parts);
    }
    case 'images':
      return cost(tierPrice(model, units.tier), units.images);
    case 'seconds':
      return cost(tierPrice(model, units.tier), units.seconds);
    case 'speech_tokens':
      return cost(tierPrice(model, model.media?.defaultTier ?? 'default'), units.tokens);
    case 'credit':
      // An operator's credit is an amount, not a use of a model.
      throw new RangeError('a credit has no list price');
  }
}

/**
 * Cost (nano-USD) of `units` at a per-unit price recorded earlier (pico-USD), not the
 * catalog's current one: a job is billed at the price it was held at, whichever instance
 * finishes it, even after a restart changed the catalog. Only units with one price (images,
 * seconds, speech tokens) can be billed this way.
 */
export function costAtPrice(units: LedgerUnits, unitPricePico: bigint): bigint {
  switch (units.kind) {
    case 'images':
      return cost(unitPricePico, units.images);
    case 'seconds':
      return cost(unitPricePico, units.seconds);
    case 'speech_tokens':
      return cost(unitPricePico, units.tokens);
    default:
      throw new RangeError(`${units.kind} units have no single unit price`);
  }
}

/** A unit price as kept in a job record: pico-USD as an exact integer string (JSON has no bigint). */
export const priceText = (pico: bigint): string => pico.toString();

/** A unit price read back from a job record, or undefined when absent or malformed (then the catalog's price applies). */
export function priceFromText(text: unknown): bigint | undefined {
  return typeof text === 'string' && /^\d{1,30}$/.test(text) ? BigInt(text) : undefined;
}
