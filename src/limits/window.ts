/** Every rate and token window spans one minute. */
export const WINDOW_MS = 60_000;
