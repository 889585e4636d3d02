/**
 * A batch's input as the runner reads it again (after a restart, or adopted by another
 * instance) takes what creation took: a rule added for new batches (a line repeating a key)
 * refuses it at creation only, so a batch accepted before the rule still runs.
 */
import { describe, expect, it } from 'vitest';
import { readBatchInput } from '../../src/operations/batches/input.js';

const line = '{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","model":"n","messages":[]}}';
const bytes = new TextEncoder().encode(`${line}\n`);

describe('a line that repeats a key in one object', () => {
  it('is refused when the batch is created, naming the line', async () => {
    await expect(readBatchInput(bytes, '/v1/chat/completions', true)).rejects.toThrow(/Line 1.*repeats the key "model"/);
  });
  it('is read as JSON.parse reads it when an accepted batch runs', async () => {
    expect((await readBatchInput(bytes, '/v1/chat/completions')).map((l) => l.body.model)).toEqual(['n']);
  });
});
