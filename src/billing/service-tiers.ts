/**
 * Service tiers a provider bills at its standard price (`service_tier`): any other tier is a
 * price of its own, which a model prices or the request is refused.
 */
const STANDARD_TIERS = new Set(['auto', 'default', 'standard_only']);

/** Whether a price-changing field's value asks for other than the standard price. */
export function asksPricedTier(value: unknown): boolean {
  return value !== undefined && value !== null && !(typeof value === 'string' && STANDARD_TIERS.has(value));
}
