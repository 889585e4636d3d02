/**
 * The chat body fast check may only accept what the chat schema accepts: it skips zod for
 * everyday bodies, so a body it lets through that zod would refuse would reach an upstream
 * unchecked. Random bodies mix valid and invalid values for every field the check reads.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chatSchema, isEverydayChat } from '../../src/operations/chat.js';

const junk = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -3, max: 3 }),
  // What JSON.parse makes of 1e400 and -1e400, too.
  fc.constantFrom(0.5, -1.5, 1e21, Number.MAX_SAFE_INTEGER + 2, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY),
  fc.string({ maxLength: 4 }),
  fc.constant([]),
  fc.constant({}),
  fc.constant([{ type: 'text' }]),
);
/** Mostly a plausible value, sometimes junk: bodies land on both sides of the check. */
const mostly = <T>(good: fc.Arbitrary<T>) => fc.oneof({ arbitrary: good, weight: 6 }, { arbitrary: junk, weight: 1 });
const role = mostly(fc.constantFrom('system', 'user', 'assistant', 'tool', 'developer'));
const part = mostly(fc.record({ type: mostly(fc.constantFrom('text', 'image_url')) }));
const content = mostly(fc.oneof(fc.string({ maxLength: 8 }), fc.constant(null), fc.array(part, { maxLength: 3 })));
const message = mostly(fc.oneof(fc.record({ role, content }, { requiredKeys: ['role'] }), fc.record({ role, content, name: junk })));
const rare = <T>(arb: fc.Arbitrary<T>) => fc.oneof({ arbitrary: fc.constant(undefined), weight: 3 }, { arbitrary: arb, weight: 1 });
const body = fc
  .record({
    model: mostly(fc.constantFrom('sim/fast-chat', '')),
    messages: mostly(fc.array(message, { maxLength: 3 })),
    stream: rare(mostly(fc.boolean())),
    max_tokens: rare(mostly(fc.integer({ min: -2, max: 5000 }))),
    // Infinity too: JSON.parse makes it of 1e400.
    temperature: rare(mostly(fc.double({ noNaN: true }))),
    stream_options: rare(mostly(fc.record({ include_usage: mostly(fc.boolean()) }, { requiredKeys: [] }))),
    n: rare(junk),
    tools: rare(junk),
    brand: rare(junk),
    user: rare(junk),
  })
  // An absent field is absent, not present as undefined (JSON has no undefined).
  .map((b) => Object.fromEntries(Object.entries(b).filter(([, v]) => v !== undefined)) as Record<string, unknown>);

describe('isEverydayChat', () => {
  it('accepts only bodies the chat schema accepts (property)', () => {
    let accepted = 0;
    fc.assert(
      fc.property(body, (b) => {
        if (isEverydayChat(b)) {
          accepted++;
          expect(chatSchema.safeParse(b).success).toBe(true);
        }
      }),
      { numRuns: 20_000 },
    );
    // The generator reaches the accepting side often enough for the property to mean something.
    expect(accepted).toBeGreaterThan(200);
  });

  it('takes the everyday shapes: plain, streamed with usage, typed parts', () => {
    const messages = [
      { role: 'system', content: 'Be terse.' },
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      { role: 'assistant', content: null },
    ];
    expect(isEverydayChat({ model: 'm', messages, max_tokens: 64 })).toBe(true);
    expect(isEverydayChat({ model: 'm', messages, stream: true, stream_options: { include_usage: true }, temperature: 0.2 })).toBe(true);
    expect(isEverydayChat({ model: 'm', messages, user: 'anything unknown passes, as in the schema' })).toBe(true);
    // Fields it does not check go to zod, whatever their value.
    expect(isEverydayChat({ model: 'm', messages, n: 1 })).toBe(false);
    expect(isEverydayChat({ model: 'm', messages, max_tokens: 0 })).toBe(false);
    expect(isEverydayChat(JSON.parse('{"model":"m","messages":[{"role":"user"}],"temperature":1e400}'))).toBe(false);
  });
});
