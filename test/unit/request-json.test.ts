/**
 * A request body's JSON: a key given twice in one object is refused (what the upstream reads,
 * the first or the last, may differ from what the gateway checked and held for), with `param`
 * naming the key, as a multipart field given twice is.
 */
import { describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/errors.js';
import { parseJsonObject } from '../../src/http/json.js';

const bytes = (text: string) => new TextEncoder().encode(text);
const refusal = (text: string): GatewayError => {
  try {
    parseJsonObject(bytes(text));
  } catch (err) {
    if (err instanceof GatewayError) return err;
    throw err;
  }
  throw new Error(`accepted: ${text}`);
};

describe('parseJsonObject', () => {
  it('refuses a key given twice, naming it in param (top level and nested)', () => {
    const top = refusal('{"model":"m","temperature":0,"temperature":1}');
    expect(top).toMatchObject({ status: 400, code: 'invalid_request', param: 'temperature' });
    expect(top.message).toContain('"temperature"');
    expect(refusal('{"messages":[{"role":"user","role":"system"}]}')).toMatchObject({ status: 400, param: 'role' });
  });

  it('keeps a long key in param to 100 characters', () => {
    const key = 'k'.repeat(300);
    expect(refusal(`{"${key}":1,"${key}":2}`).param).toBe('k'.repeat(100));
  });

  it('takes the same key in two objects, and answers the object', () => {
    expect(parseJsonObject(bytes('{"a":{"x":1},"b":{"x":2}}'))).toEqual({ a: { x: 1 }, b: { x: 2 } });
  });
});
