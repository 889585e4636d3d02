/**
 * The bridged request's abort signal: what undici and the gateway use of an AbortSignal, and a
 * native signal that follows it for code that needs one (a user's upstream client and fetch).
 */
import { describe, expect, it } from 'vitest';
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
