/**
 * Waits `ms`, or rejects with the signal's reason when `signal` aborts first. The abort
 * listener is removed when the wait ends: a simulated stream waits once per chunk on one
 * request signal, and listeners left behind pile up (MaxListenersExceededWarning after ten
 * chunks) and keep every wait's closure alive until the request ends.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Waits `ms`, or less when `signal` aborts (it resolves either way: a poller that is told to
 * stop just looks again whether it should). Its abort listener goes with the wait: one signal
 * lasts a whole poll loop.
 */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    // Aborted already: its abort event will not come again.
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
