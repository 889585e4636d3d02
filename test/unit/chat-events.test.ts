/**
 * The chat stream's events, fast path against generic path. The byte fast path (canonical
 * events found by byte search, sent as they came when nothing in them changes) must send
 * exactly what the generic parser's path sends for the same events, and record the same usage
 * and produced text, whatever the chunking: the key redacted, the model renamed, the usage
 * chunk hidden unless asked for, an error event refused.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createChatEvents } from '../../src/upstream/stream/chat-events.js';
import { createStreamOutput } from '../../src/upstream/stream/chat-output.js';
import { split } from '../helpers/split.js';

const KEY = 'sk-upstream-secret-0123';

/** One event's data: a content chunk, a usage chunk, one echoing the key, or one under another model name. */
const eventArb = fc.oneof(
  fc.record({ text: fc.constantFrom('hi', ' there', 'é', '"quoted"', 'usage', '\\n') }).map(
    ({ text }) => JSON.stringify({ id: 'c1', model: 'm-up', choices: [{ index: 0, delta: { content: text } }] }),
  ),
  fc.record({ p: fc.nat(1000), c: fc.nat(1000) }).map(({ p, c }) =>
    JSON.stringify({ id: 'c1', model: 'm-up', choices: [], usage: { prompt_tokens: p, completion_tokens: c, total_tokens: p + c } }),
  ),
  fc.constant(JSON.stringify({ id: 'c1', model: 'm-up', choices: [{ index: 0, delta: { content: `echo ${KEY}` } }] })),
  fc.constant(JSON.stringify({ id: 'c1', model: 'other', choices: [{ index: 0, delta: { content: 'x' } }] })),
  // Already the client's name; and a second top-level model after the same opening bytes as
  // the others (a reader that remembers how a stream's events start must still look at the rest).
  fc.constant(JSON.stringify({ id: 'c1', model: 'm', choices: [{ index: 0, delta: { content: 'y' } }] })),
  fc.constant('{"id":"c1","model":"m-up","choices":[{"index":0,"delta":{"content":"z"}}],"model":"m-up"}'),
  fc.constant('{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}'),
);

/** The text a content chunk produced (redacted as the client saw it), or '' for any other event. */
function contentOf(data: string): string {
  const chunk = JSON.parse(data.replaceAll(KEY, '[redacted]')) as { choices?: Array<{ delta?: { content?: string; tool_calls?: Array<{ function?: { arguments?: string } }> } }> };
  const delta = chunk.choices?.[0]?.delta;
  return (delta?.content ?? '') + (delta?.tool_calls?.[0]?.function?.arguments ?? '');
}

/** Runs a stream's bytes through a fresh ChatEvents; what was sent and what was recorded. */
function run(input: Buffer, cuts: number[], o: { renames: boolean; wantsUsage: boolean }) {
  const output = createStreamOutput();
  let produced = '';
  const add = output.add.bind(output);
  output.add = (chunk) => {
    add(chunk);
    produced += JSON.stringify(chunk);
  };
  const events = createChatEvents({
    model: { id: o.renames ? 'm' : 'm-up', upstreamModel: 'm-up' },
    apiKey: KEY,
    clientWantsUsage: o.wantsUsage,
    output,
  });
  const sent: Buffer[] = [];
  for (const chunk of split(input, cuts)) {
    for (const part of events.push(chunk)) sent.push(Buffer.from(part));
    if (events.done) break;
  }
  if (!events.done) for (const part of events.end()) sent.push(Buffer.from(part));
  // As the relay does: [DONE] goes last, once, unless the frames already end with it.
  if (events.done && !events.doneFramed) sent.push(Buffer.from('data: [DONE]\n\n'));
  return { sent: Buffer.concat(sent).toString('utf8'), usage: output.usage, done: events.done, parsed: produced, billed: billOf(output) };
}

/** What the stream's output bills: the usage it saw, else the text the tokenizer is to count. */
function billOf(output: ReturnType<typeof createStreamOutput>) {
  const produced = output.produced();
  return { usage: produced.usage, counted: produced.usage ? null : produced.output().text };
}

describe('chat stream events', () => {
  it('send and record the same on the byte fast path as on the generic path (property)', () => {
    fc.assert(
      fc.property(
        fc.array(eventArb, { minLength: 1, maxLength: 10 }),
        fc.array(fc.nat(), { maxLength: 6 }),
        fc.boolean(),
        fc.boolean(),
        fc.option(fc.record({ at: fc.nat(), odd: fc.constantFrom(': keep-alive\n\n', 'event: x\n', 'data: {"a":\ndata: 1}\n\n', '\r\n') }), { nil: null }),
        fc.constantFrom('done', 'no [DONE]', 'cut'),
        (events, cuts, renames, wantsUsage, switchTo, ending) => {
          // The fast path's stream may turn non-canonical part way (a comment, an event field,
          // multi-line data, a CR line end): the generic parser takes the rest from there.
          const frames = events.map((d) => `data: ${d}\n\n`);
          if (switchTo) frames.splice(switchTo.at % (frames.length + 1), 0, switchTo.odd);
          const tail = ending === 'done' ? 'data: [DONE]\n\n' : ending === 'cut' ? 'data: {"id":"c1","cho' : '';
          const body = frames.join('') + tail;
          // A comment first is legal SSE but not canonical: the generic parser takes the whole stream.
          const fast = run(Buffer.from(body), cuts, { renames, wantsUsage });
          const generic = run(Buffer.from(`: warming up\n\n${body}`), cuts, { renames, wantsUsage });
          expect(fast.sent).toBe(generic.sent);
          expect(fast.usage).toEqual(generic.usage);
          // Without usage the produced text is counted: the same text, read back from the
          // byte ranges the fast path kept, as from the strings the generic path kept.
          expect(fast.billed).toEqual(generic.billed);
          expect(fast.done).toBe(ending === 'done');
          expect(generic.done).toBe(ending === 'done');
          expect(fast.sent.split('[DONE]')).toHaveLength(ending === 'done' ? 2 : 1);
          if (ending === 'done') expect(fast.sent.endsWith('data: [DONE]\n\n')).toBe(true);
          expect(fast.sent).not.toContain(KEY);
          if (!wantsUsage) expect(fast.sent).not.toContain('"choices":[],"usage"');
          if (!fast.usage) expect(fast.billed.counted ?? '').toBe(events.map(contentOf).join(''));
        },
      ),
      { numRuns: 600 },
    );
  });

  it('sends an event that needed a look but no change as its own bytes, in the same part as its neighbours and [DONE]', () => {
    const usage = '{"id":"c1","model":"m-up","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}';
    const body = `data: {"id":"c1","model":"m-up","choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: ${usage}\n\ndata: [DONE]\n\n`;
    const output = createStreamOutput();
    const events = createChatEvents({ model: { id: 'm-up', upstreamModel: 'm-up' }, apiKey: KEY, clientWantsUsage: true, output });
    const parts = events.push(Buffer.from(body));
    expect(parts).toHaveLength(1);
    expect(Buffer.from(parts[0]!).toString()).toBe(body);
    expect(events.doneFramed).toBe(true);
    expect(output.usage).toEqual({ prompt: 3, completion: 2 });
  });

  it('says the content ended once every choice asked for finished (n), on the fast path and the generic one', () => {
    const chunk = (index: number, content: string, finish: string | null) =>
      `data: {"id":"c1","model":"m-up","choices":[{"index":${index},"delta":{"content":"${content}"},"finish_reason":${finish === null ? 'null' : `"${finish}"`}}]}\n\n`;
    for (const lead of ['', ': comment\n\n']) {
      const model = { id: 'm-up', upstreamModel: 'm-up' };
      const one = createChatEvents({ model, apiKey: KEY, clientWantsUsage: false });
      one.push(Buffer.from(lead + chunk(0, 'a', null) + chunk(1, 'b', null)));
      expect(one.answered).toBe(false);
      one.push(Buffer.from(chunk(0, '', 'stop')));
      expect(one.answered, 'n = 1: the first finish ends it').toBe(true);
      const two = createChatEvents({ model, apiKey: KEY, clientWantsUsage: false, choices: 2 });
      two.push(Buffer.from(lead + chunk(0, 'a', null) + chunk(1, 'b', null)));
      two.push(Buffer.from(chunk(0, '', 'stop')));
      expect(two.answered, 'n = 2: one of two finished').toBe(false);
      two.push(Buffer.from(chunk(1, 'c', null) + chunk(1, '', 'length')));
      expect(two.answered, 'n = 2: both finished').toBe(true);
    }
  });

  it('refuses an error event on either path', () => {
    const body = 'data: {"error":{"message":"boom"}}\n\ndata: [DONE]\n\n';
    for (const input of [body, `: c\n\n${body}`]) {
      expect(() => run(Buffer.from(input), [], { renames: false, wantsUsage: false })).toThrow('boom');
    }
  });
});
