/**
 * The per-request context keeps the body it read until the operation lets it go: a stream that
 * runs for minutes must not hold the client's prompt once its upstream request is out.
 */
import { describe, expect, it } from 'vitest';
import { contextOf } from '../../src/pipeline/context.js';
import { collected } from '../helpers/gc.js';
import type { Exchange } from '../../src/pipeline/types.js';

/** A request whose body is `size` bytes made when read: the request itself keeps no reference to them. */
function exchangeWith(size: number, fill: (bytes: Uint8Array) => void = (b) => b.fill(97)): Exchange {
  const request = {
    method: 'POST',
    headers: new Headers({ 'content-length': String(size) }),
    arrayBuffer: async () => {
      const bytes = new Uint8Array(size);
      fill(bytes);
      return bytes;
    },
  } as unknown as Request;
  return {
    request,
    serverContext: undefined,
    requestId: 'req_test',
    path: '/v1/chat/completions',
    query: '',
    headers: {},
    clientIp: '127.0.0.1',
    route: { name: '/v1/chat/completions', params: {}, idempotent: true, run: async () => new Response(null) },
    key: { id: 'key_1', accountId: 'acct_1' } as Exchange['key'],
    keyCheck: null,
    observed: {} as Exchange['observed'],
    late: null,
  };
}

/** Reads a 1 MB body through a fresh context and returns a weak reference to the bytes it read. */
async function readThrough(release: boolean) {
  const x = exchangeWith(1 << 20);
  const ctx = contextOf(x, 2 << 20, 1_000);
  const ref = new WeakRef(await ctx.body());
  if (release) ctx.releaseBody();
  return { ctx, ref };
}

describe('RequestContext.releaseBody', () => {
  it('reads the body once and hands the same bytes to every reader', async () => {
    const ctx = contextOf(
      exchangeWith(3, (b) => b.set([1, 2, 3])),
      1024,
      1_000,
    );
    const first = await ctx.body();
    expect(await ctx.body()).toBe(first);
    expect([...first]).toEqual([1, 2, 3]);
  });

  it('keeps the bytes while the context lives and the body is not released', async () => {
    const { ctx, ref } = await readThrough(false);
    expect(await collected(ref)).toBe(false);
    expect(ctx).toBeDefined();
  });

  it('lets the bytes be collected once released, though the context lives on', async () => {
    const { ctx, ref } = await readThrough(true);
    expect(await collected(ref)).toBe(true);
    expect(ctx).toBeDefined();
  });

  it('refuses a read after the release instead of reading a consumed body again', async () => {
    const { ctx } = await readThrough(true);
    await expect(ctx.body()).rejects.toThrow(/released/);
  });
});
