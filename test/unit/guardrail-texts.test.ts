/**
 * Where a prompt keeps text the model reads, beyond content strings: each place below is read
 * by the input guardrails (found, and rewritten in place), since it reaches the upstream as it
 * came when the model's upstream speaks the client's API.
 */
import { describe, expect, it } from 'vitest';
import { mapPromptTexts, promptTexts } from '../../src/guardrails/texts.js';

const PII = 'john@example.com';
const redact = (t: string) => t.replaceAll(PII, '[X]');

describe('prompt texts', () => {
  it('a Messages document given as content blocks, and its title and context', () => {
    const fields = {
      model: 'm',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'document', source: { type: 'content', content: [{ type: 'text', text: `mail ${PII}` }] }, title: `from ${PII}`, context: `cc ${PII}` },
            { type: 'document', source: { type: 'content', content: `plain ${PII}` } },
          ],
        },
      ],
    };
    expect(promptTexts(fields).filter((t) => t.includes(PII))).toHaveLength(4);
    const out = mapPromptTexts(fields, redact);
    expect(JSON.stringify(out)).not.toContain(PII);
    expect((out.messages as Array<{ content: Array<Record<string, unknown>> }>)[0]!.content[0]).toEqual({
      type: 'document',
      source: { type: 'content', content: [{ type: 'text', text: 'mail [X]' }] },
      title: 'from [X]',
      context: 'cc [X]',
    });
    // Untouched input is the same object (so an untouched body goes upstream as it came).
    expect(mapPromptTexts(fields, (t) => t)).toBe(fields);
  });

  it("chat tool-call arguments sent as an object, an assistant's refusal, a Responses reasoning summary", () => {
    const chat = {
      messages: [
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: { to: PII, [PII]: 1 } } }] },
        { role: 'assistant', content: null, refusal: `no, ${PII}` },
      ],
    };
    const out = mapPromptTexts(chat, redact) as typeof chat;
    expect(JSON.stringify(out)).not.toContain(PII);
    expect(out.messages[0]!.tool_calls![0]!.function.arguments).toEqual({ to: '[X]', '[X]': 1 });
    const responses = { input: [{ type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: `user is ${PII}` }] }] };
    expect(JSON.stringify(mapPromptTexts(responses, redact))).not.toContain(PII);
  });
});
