import type { TokenResult } from '../types.js';

interface Take {
  id: string;
  at: number;
  tokens: number;
}

interface TokenWindow {
  /** The takes, oldest first, from index `head` on. */
  takes: Take[];
  head: number;
  byId: Map<string, Take>;
  /** Sum of the tokens of the takes still in the window. */
  used: number;
  windowMs: number;
}

/** Drops the takes at or before `t - windowMs`. Amortised O(1) per take, as the rate windows trim. */
function trim(w: TokenWindow, t: number): void {
  const edge = t - w.windowMs;
  let head = w.head;
  while (head < w.takes.length && (w.takes[head] as Take).at <= edge) {
    const take = w.takes[head] as Take;
    w.used -= take.tokens;
    w.byId.delete(take.id);
    head++;
  }
  if (head === w.takes.length) {
    w.takes = [];
    head = 0;
  } else if (head > 1024 && head * 2 > w.takes.length) {
    w.takes = w.takes.slice(head);
    head = 0;
  }
  w.head = head;
}

/**
 * Token windows in one process (tokens per minute). Each call reads and writes synchronously,
 * so it is atomic. An emptied window is deleted on its next look; `sweep` drops idle ones.
 */
export function createMemoryTokenWindows(now: () => number) {
  const windows = new Map<string, TokenWindow>();

  function live(bucket: string, t: number): TokenWindow | undefined {
    const w = windows.get(bucket);
    if (!w) return undefined;
    trim(w, t);
    if (w.byId.size === 0) {
      windows.delete(bucket);
      return undefined;
    }
    return w;
  }

  return {
    take(bucket: string, takeId: string, tokens: number, limit: number, windowMs: number): TokenResult {
      const t = now();
      const w = live(bucket, t) ?? { takes: [], head: 0, byId: new Map<string, Take>(), used: 0, windowMs };
      w.windowMs = windowMs;
      const oldest = w.takes[w.head];
      if (w.byId.has(takeId) || w.used + tokens <= limit) {
        if (!w.byId.has(takeId)) {
          const take = { id: takeId, at: t, tokens };
          w.takes.push(take);
          w.byId.set(takeId, take);
          w.used += tokens;
          windows.set(bucket, w);
        }
        const first = w.takes[w.head] as Take;
        return { allowed: true, limit, remaining: Math.max(0, limit - w.used), resetMs: Math.max(0, first.at + windowMs - t) };
      }
      const remaining = Math.max(0, limit - w.used);
      if (tokens > limit || !oldest) return { allowed: false, limit, remaining, resetMs: -1 };
      // Walk from the oldest take until enough has left for these tokens to fit.
      let free = limit - w.used;
      for (let i = w.head; i < w.takes.length; i++) {
        const take = w.takes[i] as Take;
        free += take.tokens;
        if (free >= tokens) return { allowed: false, limit, remaining, resetMs: Math.max(1, take.at + windowMs - t) };
      }
      return { allowed: false, limit, remaining, resetMs: -1 };
    },

    set(bucket: string, takeId: string, tokens: number): void {
      const w = live(bucket, now());
      const take = w?.byId.get(takeId);
      if (!w || !take) return;
      w.used += tokens - take.tokens;
      take.tokens = tokens;
    },

    sweep(t: number): void {
      for (const bucket of [...windows.keys()]) live(bucket, t);
    },
  };
}

export type MemoryTokenWindows = ReturnType<typeof createMemoryTokenWindows>;
