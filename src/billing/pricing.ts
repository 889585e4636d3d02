/**
 * The list price of what a call used, in one place for every endpoint: a new endpoint says
 * which units it bills, and its cost comes from here. Exact: pico-USD prices times whole
 * units, rounded up to the nano-USD once per call.
 */
import type { Model } from '../catalog/catalog.js';
import { cost, costOf, costOfScaled, formatPrice, parsePrice } from './money.js';
import type { LedgerUnits, UnitPrices } from '../stores/types.js';

/** The per-unit price (pico-USD) of a media tier: the tier's own, else the model's `from` price. */
export function tierPrice(model: Model, tier: string): bigint {
  const media = model.media;
  if (!media) throw new RangeError(`model ${model.id} has no media pricing`);
  return media.tiers.get(tier) ?? media.fromPico;
}

/**
 * What a charge counts, part by part, each named as its price is named on the ledger entry:
 * tokens as `prompt` (the prompt less its cache reads and writes), `cachedPrompt` and
 * `cacheWrite` (when the units have them; `cacheWrite` less the hour-long writes, which are
 * `cacheWrite1h` at their own price), `completion` (reasoning is a part of it: not
 * added), and `tool:<name>` per priced hosted tool; media as `images`, `seconds` or `tokens`.
 * Billing and the audit both price these, so a charge is re-derived exactly as it was made.
 */
export function unitCounts(units: LedgerUnits): Array<[part: string, count: number]> {
  switch (units.kind) {
    case 'tokens': {
      const cached = units.cachedPrompt ?? 0;
      const written = units.cacheWrite ?? 0;
      // Hour-long writes are a part of the writes, at their own price (twice the prompt's by default).
      const writtenHour = Math.min(units.cacheWrite1h ?? 0, written);
      const uncached = units.prompt - cached - written;
      if (uncached < 0) throw new RangeError(`cache reads and writes exceed the prompt of ${units.prompt} tokens`);
      const parts: Array<[string, number]> = [['prompt', uncached], ['completion', units.completion]];
      if (units.cachedPrompt !== undefined) parts.push(['cachedPrompt', cached]);
      if (units.cacheWrite !== undefined) parts.push(['cacheWrite', written - writtenHour]);
      if (writtenHour > 0) parts.push(['cacheWrite1h', writtenHour]);
      for (const [tool, calls] of Object.entries(units.tools ?? {})) parts.push([`tool:${tool}`, calls]);
      return parts;
    }
    case 'images':
      return [['images', units.images]];
    case 'seconds':
      return [['seconds', units.seconds]];
    case 'speech_tokens':
      return [['tokens', units.tokens]];
    case 'guardrail':
      return [['checks', units.checks]];
    case 'credit':
      // An operator's credit is an amount, not a use of a model.
      throw new RangeError('a credit has no list price');
  }
}

/** The catalog's price (pico-USD) of one part of `units` on `model` (see unitCounts). */
function catalogPrice(model: Model, units: LedgerUnits, part: string): bigint {
  if (units.kind === 'images' || units.kind === 'seconds') return tierPrice(model, units.tier);
  if (units.kind === 'speech_tokens') return tierPrice(model, model.media?.defaultTier ?? 'default');
  // A guardrail's checks are priced by the guardrail, never by a model: billed at its price.
  if (units.kind === 'guardrail') throw new RangeError(`guardrail ${units.id}'s checks have no catalog price`);
  const text = model.text;
  if (!text) throw new RangeError(`model ${model.id} has no token pricing`);
  if (part === 'prompt') return text.promptPico;
  if (part === 'completion') return text.completionPico;
  if (part === 'cachedPrompt') return text.cachedPromptPico;
  if (part === 'cacheWrite') return text.cacheWritePico;
  if (part === 'cacheWrite1h') return text.cacheWrite1hPico;
  // Hosted tool calls are priced per call; a call of a tool the model does not price is
  // never counted (its request is refused), so a missing price here is a program error.
  const tool = part.slice('tool:'.length);
  const price = model.toolPrices?.get(tool);
  if (price === undefined) throw new RangeError(`model ${model.id} has no price for the tool ${tool}`);
  return price;
}

/** List cost (nano-USD) of `units` on `model`. */
export function listCost(model: Model, units: LedgerUnits): bigint {
  return costOf(unitCounts(units).map(([part, count]) => [catalogPrice(model, units, part), count]));
}

/** A charge: its cost and the unit prices it was computed at, as its ledger entry keeps them. */
export interface Charge {
  cost: bigint;
  prices: UnitPrices;
}

/**
 * The charge for `units`: at the model's prices (those of the model the call was held on), or
 * at `unitPricePico` for every unit (a job billed at the price it was held at). Rounded up to
 * the nano-USD once, as listCost.
 */
export function chargeOf(model: Model, units: LedgerUnits, unitPricePico?: bigint, hitPrice?: string): Charge {
  if (unitPricePico !== undefined && units.kind === 'tokens') throw new RangeError('tokens units have no single unit price');
  const prices: UnitPrices = {};
  const parts: Array<[bigint, number]> = [];
  for (const [part, count] of unitCounts(units)) {
    const price = unitPricePico ?? catalogPrice(model, units, part);
    prices[part] = formatPrice(price);
    parts.push([price, count]);
  }
  if (hitPrice === undefined) return { cost: costOf(parts), prices };
  // A cache hit: the fraction of the list cost it is billed at is kept beside the unit prices.
  prices[HIT_PRICE] = hitPrice;
  return { cost: costOfScaled(parts, hitPrice), prices };
}

/**
 * The name a cache hit's fraction of the list cost is kept under among its entry's prices
 * (a name no unit part has, so the audit re-derives a hit's cost like any other).
 */
export const HIT_PRICE = 'hitPrice';

/** The list cost (nano-USD) of `units` times `hitPrice`, rounded up once: what a cache hit costs. */
export function hitCost(model: Model, units: LedgerUnits, hitPrice: string): bigint {
  return chargeOf(model, units, undefined, hitPrice).cost;
}

/**
 * The cost (nano-USD) of `units` at the prices a ledger entry kept: what the audit expects
 * the entry's cost to be. Throws a RangeError when a part of the units has no kept price.
 */
export function costAtPrices(units: LedgerUnits, prices: UnitPrices): bigint {
  const parts = unitCounts(units).map(([part, count]): [bigint, number] => {
    const price = Object.hasOwn(prices, part) ? prices[part] : undefined;
    if (typeof price !== 'string') throw new RangeError(`no price kept for ${part}`);
    return [parsePrice(price), count];
  });
  const fraction = Object.hasOwn(prices, HIT_PRICE) ? prices[HIT_PRICE] : undefined;
  return fraction === undefined ? costOf(parts) : costOfScaled(parts, fraction);
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
    case 'guardrail':
      return cost(unitPricePico, units.checks);
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
