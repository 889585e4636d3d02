import { describe, expect, it } from 'vitest';
import { redactingLogger } from '../../src/observability/logs.js';
import { keyRedactor, REDACTED, upstreamKeysRedactor } from '../../src/upstream/key-redactor.js';

const KEY = 'sk-upstream-SECRET-123456';

describe('keyRedactor', () => {
  const redact = keyRedactor([KEY]);

  it('removes a key cut in two: each piece of 6 or more characters', () => {
    const out = redact('Incorrect API key provided: "sk-upstream-S|ECRET-123456".');
    expect(out).toBe(`Incorrect API key provided: "${REDACTED}|${REDACTED}".`);
  });

  it('removes the whole key, and a key’s middle 6 characters alone', () => {
    expect(redact(`key ${KEY} refused`)).toBe(`key ${REDACTED} refused`);
    const middle = KEY.slice(9, 15);
    expect(middle).toHaveLength(6);
    expect(redact(`fragment ${middle} here`)).toBe(`fragment ${REDACTED} here`);
    // Runs that touch or overlap widen into one.
    expect(redact(`${KEY.slice(0, 8)}${KEY.slice(4, 20)}`)).toBe(REDACTED);
  });

  it('leaves ordinary text, and runs of 5 or fewer characters of a key, intact', () => {
    const text = 'The model is overloaded: retry in 3 s. Bad request: "messages" must be a non-empty array.';
    expect(redact(text)).toBe(text);
    const five = `${KEY.slice(0, 5)} ${KEY.slice(5, 10)} ${KEY.slice(10, 15)}`;
    expect(redact(five)).toBe(five);
    expect(redact('')).toBe('');
  });

  it('covers every configured upstream key; a key too short to search for is left out', () => {
    const other = 'ups-other-0123456789abcdef';
    const all = upstreamKeysRedactor({ upstreams: { a: { baseUrl: 'x', apiKey: KEY }, b: { baseUrl: 'y', apiKey: other }, c: { simulate: true }, d: { apiKey: 'abc' } } });
    expect(all(`a ${KEY.slice(3, 12)} b ${other.slice(10, 20)} abc`)).toBe(`a ${REDACTED} b ${REDACTED} abc`);
  });

  it("covers a key an upstream's headers or query carry (Azure's api-key), by the header's name; other headers stay readable", () => {
    const redact = upstreamKeysRedactor({
      upstreams: {
        azure: { baseUrl: 'x', headers: { 'api-key': 'AZ9x7QwLmN4pRt2VbYhJ8kZc', 'api-version': '2024-06-01' } },
        proxy: { baseUrl: 'y', headers: { Authorization: 'Bearer prox-0123456789abcdef', 'x-goog-api-key': 'goog-9876543210' } },
        gemini: { baseUrl: 'z', query: { key: 'AIzaSyQUERYKEY00000' } },
      },
    });
    const text = 'Incorrect API key provided: api-key=AZ9x7QwLmN4pRt2VbYhJ8kZc, prox-0123456789abcdef, goog-9876543210, AIzaSyQUERYKEY00000';
    expect(redact(text)).toBe(`Incorrect API key provided: api-key=${REDACTED}, ${REDACTED}, ${REDACTED}, ${REDACTED}`);
    // The version's date, and the word Bearer, are not key material.
    expect(redact('Bearer tokens since 2024-06-01')).toBe('Bearer tokens since 2024-06-01');
  });
});

describe('redactingLogger', () => {
  it('redacts every string of a line, nested and in errors, and leaves clean lines as they are', () => {
    const seen: Record<string, unknown>[] = [];
    const log = redactingLogger({ info: (e) => seen.push(e), warn: (e) => seen.push(e), error: (e) => seen.push(e) }, keyRedactor([KEY]));
    const clean = { msg: 'access', status: 200, nested: { a: ['x'] } };
    log.info(clean);
    expect(seen[0]).toBe(clean);
    log.warn({ msg: 'video poll failed', err: `Unexpected token in "sk-upstream-S|ECRET-123456"`, detail: { list: [KEY] }, error: new Error(`bad ${KEY}`) });
    const text = JSON.stringify(seen[1]);
    expect(text).not.toContain('sk-upstream-S');
    expect(text).not.toContain('ECRET-123456');
    expect(text).toContain('video poll failed');
    expect((seen[1] as { error: { message: string } }).error.message).toBe(`bad ${REDACTED}`);
  });
});
