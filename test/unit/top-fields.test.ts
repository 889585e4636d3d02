/**
 * The byte scan of a JSON object's top-level fields (stream/top-fields.ts), and the chat
 * stream's reader that renames the model and drops the unasked usage chunk by it: only the
 * answer's own top-level `model` is renamed (never a name inside content text or a nested
 * object), the scan is unsure rather than wrong (escapes, a second `model`), and the usage-only
 * chunk is recognised by its bytes whatever the reads' boundaries.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { hasEscapedKey } from '../../src/upstream/stream/chat-marks.js';
import { createChatEvents } from '../../src/upstream/stream/chat-events.js';
import { createStreamOutput } from '../../src/upstream/stream/chat-output.js';
import { TopFields, withModel } from '../../src/upstream/stream/top-fields.js';

const NAME = 'bench/mini';

/** What a parse-and-re-serialise rename gives: the reference the in-place rename must agree with. */
const parsedRename = (text: string) => ({ ...(JSON.parse(text) as object), model: NAME });

describe('top-level fields scan', () => {
  it('renames only the top-level model, whatever comes before it or holds the word', () => {
    const cases = [
      '{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[]}',
      // The name and the field written inside content text come before and after the real one.
      '{"id":"\\"model\\":\\"gpt\\"","model":"up","choices":[{"delta":{"content":"say \\"model\\":\\"up\\" please"}}]}',
      // A nested object's model key comes first: it is skipped as part of its value.
      '{"meta":{"model":"inner","list":[{"model":"x"},"]}"]},"model":"outer"}',
      // The model after choices (another provider's order), with whitespace around the colon.
      '{ "choices" : [ {"index":0,"delta":{"content":"}{]["}} ] , "model" : "up" }',
      // Escaped quotes and backslashes in strings before it.
      '{"id":"a\\\\","x":"b\\\\\\"c","model":"up"}',
    ];
    for (const text of cases) {
      const renamed = withModel(text, NAME);
      expect(renamed, text).not.toBeNull();
      expect(JSON.parse(renamed!)).toEqual(parsedRename(text));
      // Only the value's bytes changed: everything around it is as it came.
      const f = new TopFields();
      expect(f.scan(text, 0, text.length, true)).toBe(true);
      expect(renamed!.slice(0, f.modelFrom)).toBe(text.slice(0, f.modelFrom));
      expect(renamed!.slice(f.modelFrom + JSON.stringify(NAME).length)).toBe(text.slice(f.modelTo));
    }
  });

  it('is unsure (null) where an in-place rename could be wrong, and never renames what needs none', () => {
    const unsure = [
      '{"model":"a","model":"b"}', // a parse takes the last
      '{"mod\\u0065l":"a","model":"b"}', // the same key twice, once spelled with an escape
      '{"model":"a","mod\\u0065l":"b"}', // the same, the escaped one last (a parse keeps it)
      '{"mod\\u0065l":"up"}', // any key written with an escape: the caller's parse renames it
      '{"model":"gpt\\u002d4"}', // a name with an escape
      '{"model":"a","choices":[{"delta":{"content":"x"}}],"note":"model"}', // a second "model" after it, even as text
      '["model","a"]', // not an object
    ];
    for (const text of unsure) expect(withModel(text, NAME), text).toBeNull();
    // What follows the model is read only by a full scan (a plain answer was parsed before).
    for (const text of ['{"model":"a"', '{"model":"a",}', '{"model":"a" "b":1}']) expect(new TopFields().scan(text, 0, text.length), text).toBe(false);
    // No model string, or already the name: nothing to rename in place.
    expect(withModel('{"id":"x","choices":[]}', NAME)).toBeNull();
    expect(withModel('{"model":null}', NAME)).toBeNull();
    expect(withModel(`{"model":${JSON.stringify(NAME)}}`, NAME)).toBeNull();
  });

  it('agrees with a parse for any object with a model string (property)', () => {
    const key = fc.oneof(fc.constantFrom('id', 'choices', 'usage', 'object', 'modelx', 'xmodel', 'Model'), fc.string());
    fc.assert(
      fc.property(fc.dictionary(key, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 }), fc.nat(6), fc.string(), fc.boolean(), (rest, at, name, spaced) => {
        delete (rest as Record<string, unknown>).model;
        const entries = Object.entries(rest);
        entries.splice(at % (entries.length + 1), 0, ['model', name]);
        let text = JSON.stringify(Object.fromEntries(entries), null, spaced ? 1 : 0);
        if (!spaced) text = JSON.stringify(Object.fromEntries(entries));
        const renamed = withModel(text, NAME);
        if (renamed !== null) expect(JSON.parse(renamed)).toEqual(parsedRename(text));
        // Sure whenever nothing could mislead it: no escape in the name or any key, no "model" text after it.
        const after = text.slice(text.indexOf('"model":') + 8 + JSON.stringify(name).length);
        if (name !== NAME && JSON.stringify(name) === `"${name}"` && !after.includes('"model"') && !spaced && !hasEscapedKey(text)) expect(renamed).not.toBeNull();
        // Bytes and text read alike.
        const bytes = Buffer.from(text);
        const fb = new TopFields();
        const ft = new TopFields();
        expect(fb.scan(bytes, 0, bytes.length)).toBe(ft.scan(text, 0, text.length));
        expect(Buffer.byteLength(text.slice(0, ft.modelFrom))).toBe(fb.modelFrom);
      }),
      { numRuns: 400 },
    );
  });

  it('finds choices empty and the usage value', () => {
    const f = new TopFields();
    for (const [text, empty] of [
      ['{"choices":[],"usage":{"prompt_tokens":1}}', true],
      ['{"choices": [ ] ,"usage":{"prompt_tokens":1}}', true],
      ['{"choices":[{"index":0,"delta":{"content":"[]"}}],"usage":{"prompt_tokens":1}}', false],
      ['{"usage":{"prompt_tokens":1}}', false],
    ] as const) {
      expect(f.scan(text, 0, text.length)).toBe(true);
      expect(f.noChoices(text), text).toBe(empty);
      if (text.includes('usage')) expect(JSON.parse(text.slice(f.usageFrom, f.usageTo))).toEqual({ prompt_tokens: 1 });
    }
    const failed = '{"error":{"message":"x"},"choices":[]}';
    expect(f.scan(failed, 0, failed.length)).toBe(true);
    expect(f.error).toBe(true);
  });
});

/** A stream of the real shape under the upstream's own name: content, a finish, the usage chunk, [DONE]. */
function stream(model: string, usageChoices = '[]'): string {
  const chunk = (delta: object, finish: string | null) =>
    `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  return (
    chunk({ role: 'assistant', content: 'The "model":"gpt-up" is' }, null) +
    chunk({ content: ` named ${model}` }, null) +
    chunk({}, 'stop') +
    `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"${model}","choices":${usageChoices},"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}\n\n` +
    'data: [DONE]\n\n'
  );
}

/** The body through a reader under the alias, read in `reads`; what the client got and what was recorded. */
function relay(reads: Buffer[], wantsUsage: boolean) {
  const output = createStreamOutput();
  const events = createChatEvents({ model: { id: NAME, upstreamModel: 'gpt-up' }, apiKey: 'sk-up-key', clientWantsUsage: wantsUsage, output });
  const sent: Buffer[] = [];
  for (const r of reads) {
    for (const part of events.push(r)) sent.push(Buffer.from(part));
    if (events.done) break;
  }
  if (events.done && !events.doneFramed) sent.push(Buffer.from('data: [DONE]\n\n'));
  return { text: Buffer.concat(sent).toString(), usage: output.usage, done: events.done };
}

const dataOf = (text: string) =>
  text
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)) as Record<string, unknown>);

describe('chat stream under an alias, by bytes', () => {
  it('renames every event and drops the unasked usage chunk, however the reads cut it', () => {
    const body = Buffer.from(stream('gpt-4o-up-2024-07-18'));
    const whole = relay([body], false);
    expect(whole.done).toBe(true);
    const events = dataOf(whole.text);
    expect(events).toHaveLength(3);
    for (const e of events) expect(e.model).toBe(NAME);
    // The name written in content is content: untouched.
    expect((events[0]!.choices as Array<{ delta: { content: string } }>)[0]!.delta.content).toBe('The "model":"gpt-up" is');
    expect((events[1]!.choices as Array<{ delta: { content: string } }>)[0]!.delta.content).toBe(' named gpt-4o-up-2024-07-18');
    expect(whole.text).not.toContain('"usage"');
    expect(whole.usage).toEqual({ prompt: 7, completion: 5 });
    // Every cut into two reads, each byte alone, and every event in its own read: the same.
    for (let cut = 1; cut < body.length; cut++) expect(relay([body.subarray(0, cut), body.subarray(cut)], false)).toEqual(whole);
    expect(relay([...body].map((b) => Buffer.from([b])), false)).toEqual(whole);
  });

  it('changes nothing but the name in the bytes of an event: no re-serialising', () => {
    // Spaces, an escaped character and a key order a re-serialise would not keep as they came.
    const event = '{"id": "c", "model": "gpt-up", "choices": [{"index": 0, "delta": {"content": "caf\\u00e9 \\/ 1.0e2"}}]}';
    const out = relay([Buffer.from(`data: ${event}\n\ndata: ${event}\n\ndata: [DONE]\n\n`)], false);
    const renamed = event.replace('"gpt-up"', JSON.stringify(NAME));
    expect(out.text).toBe(`data: ${renamed}\n\ndata: ${renamed}\n\ndata: [DONE]\n\n`);
  });

  it('keeps the usage chunk, renamed, for a client that asked, and one that carries choices too', () => {
    const asked = relay([Buffer.from(stream('gpt-up'))], true);
    const events = dataOf(asked.text);
    expect(events).toHaveLength(4);
    expect(events[3]).toEqual({ id: 'c', object: 'chat.completion.chunk', created: 1, model: NAME, choices: [], usage: { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 } });
    expect(asked.usage).toEqual({ prompt: 7, completion: 5 });
    // A usage chunk with a choice is content: it goes out (renamed) to a client that did not ask.
    const withChoice = relay([Buffer.from(stream('gpt-up', '[{"index":0,"delta":{"content":"!"}}]'))], false);
    const last = dataOf(withChoice.text)[3]!;
    expect(last.model).toBe(NAME);
    expect(last.choices).toEqual([{ index: 0, delta: { content: '!' } }]);
    expect(withChoice.usage).toEqual({ prompt: 7, completion: 5 });
  });

  it('leaves a usage chunk that reports nothing usable or an error to the parse', () => {
    const nullUsage = 'data: {"id":"c","model":"gpt-up","choices":[],"usage":null}\n\ndata: [DONE]\n\n';
    const r = relay([Buffer.from(nullUsage)], false);
    expect(dataOf(r.text)).toEqual([{ id: 'c', model: NAME, choices: [], usage: null }]);
    expect(r.usage).toBeNull();
    const failed = 'data: {"model":"gpt-up","choices":[],"usage":{"prompt_tokens":1},"error":{"message":"boom"}}\n\n';
    expect(() => relay([Buffer.from(failed)], false)).toThrow();
  });
});
