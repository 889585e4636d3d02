/**
 * Marks every StoreUnavailableError, whichever copy of this module made it. A bundle (the
 * CLI loads the Redis stores from their own entry) or an install that loads both the ESM and
 * the CJS build holds two copies of the class, and an error thrown by one copy's stores must
 * still be recognised by the other copy's gateway: identity (`instanceof`) cannot do that, a
 * symbol from the global registry can.
 */
const BRAND = Symbol.for('model-gateway.StoreUnavailableError');

/**
 * Thrown by a store whose backend cannot be reached or failed. Wherever it surfaces, the
 * gateway answers 503 service_unavailable with Retry-After (money and limit paths fail closed).
 * `err instanceof StoreUnavailableError` holds for one made by any copy of the package.
 */
export class StoreUnavailableError extends Error {
  override name = 'StoreUnavailableError';
  readonly [BRAND] = true;

  static override [Symbol.hasInstance](this: abstract new (...args: never[]) => unknown, value: unknown): boolean {
    // Subclasses (RedisStoreError) keep the ordinary prototype check.
    // biome-ignore lint/complexity/noThisInStatic: `this` tells the base class from a subclass here.
    if (this !== StoreUnavailableError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return isStoreUnavailable(value);
  }
}

/** Whether `err` is a StoreUnavailableError made by any copy of this package. */
export function isStoreUnavailable(err: unknown): err is StoreUnavailableError {
  return typeof err === 'object' && err !== null && (err as { [BRAND]?: unknown })[BRAND] === true;
}
