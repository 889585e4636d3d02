/**
 * Thrown by a store whose backend cannot be reached or failed. Wherever it surfaces, the
 * gateway answers 503 service_unavailable with Retry-After (money and limit paths fail closed).
 */
export class StoreUnavailableError extends Error {
  override name = 'StoreUnavailableError';
}
