/**
 * The bridged request's abort signal: what undici and the gateway use of an AbortSignal, and a
 * native signal that follows it for code that needs one (a user's upstream client and fetch).
 */
import { describe, expect, it, vi } from 'vitest';
import { ClientSignal, nativeSignal } from '../../src/http/node-lane.js';

describe('ClientSignal', () => {
  it('aborts once: each listener and onabort run one time, with the reason; removed listeners do not', () => {
    const s = new ClientSignal();
    const seen: string[] = [];
    const a = () => seen.push('a');
    const b = () => seen.push('b');
    s.addEventListener('abort', a);
    s.addEventListener('abort', b);
    s.addEventListener('other', () => seen.push('other'));
    s.onabort = () => seen.push('onabort');
    s.removeEventListener('abort', b);
    expect(s.aborted).toBe(false);
    expect(() => s.throwIfAborted()).not.toThrow();
    const reason = new Error('client went away');
    s.abort(reason);
    s.abort(new Error('again'));
    expect(seen).toEqual(['onabort', 'a']);
    expect(s.aborted).toBe(true);
    expect(s.reason).toBe(reason);
    expect(() => s.throwIfAborted()).toThrow('client went away');
  });

  it('runs listeners as an EventTarget does: the signal as this and as the target, duplicates once, a throwing one stops nothing', () => {
    const s = new ClientSignal();
    const seen: unknown[] = [];
    const once = function (this: unknown, e: Event) {
      seen.push([this === s, (e.target as unknown) === s, e.type]);
    };
    s.addEventListener('abort', once);
    s.addEventListener('abort', once);
    s.addEventListener('abort', () => {
      throw new Error('a listener failed');
    });
    s.addEventListener('abort', () => seen.push('after the thrower'));
    // The thrower's error is thrown again on the next tick, as an uncaught error.
    let later: (() => void) | undefined;
    const nextTick = vi.spyOn(process, 'nextTick').mockImplementationOnce((fn) => void (later = fn as () => void));
    try {
      expect(() => s.abort()).not.toThrow();
    } finally {
      nextTick.mockRestore();
    }
    expect(seen).toEqual([[true, true, 'abort'], 'after the thrower']);
    expect(later).toBeTypeOf('function');
    expect(() => later!()).toThrow('a listener failed');
  });

  it('without a reason aborts with an AbortError', () => {
    const s = new ClientSignal();
    s.abort();
    expect((s.reason as DOMException).name).toBe('AbortError');
  });

  it('nativeSignal follows it, before and after the abort; a native signal is passed through', () => {
    const s = new ClientSignal();
    const before = nativeSignal(s as unknown as AbortSignal);
    expect(before).toBeInstanceOf(AbortSignal);
    expect(before.aborted).toBe(false);
    s.abort(new Error('gone'));
    expect(before.aborted).toBe(true);
    expect((before.reason as Error).message).toBe('gone');
    const after = nativeSignal(s as unknown as AbortSignal);
    expect(after.aborted).toBe(true);
    const native = new AbortController().signal;
    expect(nativeSignal(native)).toBe(native);
  });
});
