/**
 * Embeddings from the built-in simulator, with the official `openai` SDK as a new user calls
 * it: the SDK asks for `encoding_format: "base64"` unless told otherwise and decodes the answer
 * as little-endian float32, so the simulator must answer base64 when asked (floats read as
 * base64 decode to garbage, with no error).
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';

const EMBED = 'sim/embed';
let gw: RunningGateway;
let client: OpenAI;

beforeAll(async () => {
  const setup = testConfig({
    models: [{ id: EMBED, type: 'text', upstream: 'test', embedding: true, pricing: { prompt: '0.0000001', completion: '0' } }],
  });
  gw = await startGateway(setup.options);
  client = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
});

afterAll(async () => {
  await gw?.close();
});

describe('the simulator honours encoding_format', () => {
  it("the SDK's default call (base64) gets 256 floats, equal to the float answer", async () => {
    const input = ['The quick brown fox', 'jumps over the lazy dog'];
    const byDefault = await client.embeddings.create({ model: EMBED, input });
    const floats = await client.embeddings.create({ model: EMBED, input, encoding_format: 'float' });
    expect(byDefault.data).toHaveLength(2);
    for (const [i, item] of byDefault.data.entries()) {
      expect(item.embedding).toHaveLength(256);
      expect(item.embedding).toEqual(floats.data[i]!.embedding);
      // A unit vector, not zeros.
      expect(Math.hypot(...item.embedding)).toBeCloseTo(1, 5);
    }
    expect(byDefault.data[0]!.embedding).not.toEqual(byDefault.data[1]!.embedding);
  });

  it('base64 on the wire is the little-endian float32 bytes; `dimensions` sets the length', async () => {
    const res = await fetch(`${gw.baseURL}/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${client.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: EMBED, input: 'hello', encoding_format: 'base64', dimensions: 64 }),
    });
    expect(res.status).toBe(200);
    const wire = ((await res.json()) as { data: Array<{ embedding: unknown }> }).data[0]!.embedding;
    expect(typeof wire).toBe('string');
    const bytes = Buffer.from(wire as string, 'base64');
    expect(bytes.length).toBe(64 * 4);
    const decoded = Array.from({ length: 64 }, (_, i) => bytes.readFloatLE(i * 4));
    const floats = await client.embeddings.create({ model: EMBED, input: 'hello', encoding_format: 'float', dimensions: 64 });
    expect(decoded).toEqual(floats.data[0]!.embedding);
  });
});
