/**
 * Runs of adjacent text parts, read joined: merged into one part that keeps every part's other
 * fields (an Anthropic cache breakpoint on the last block stays at the run's end), and joined
 * for a moderation so that each text is read once, not once alone and again joined.
 */
import { describe, expect, it } from 'vitest';
import { joinSplitTexts, mergeSplitTexts, someSplitText } from '../../src/guardrails/split-texts.js';
import { promptTexts } from '../../src/guardrails/texts.js';

const system = [
  { type: 'text', text: 'mail me at john' },
  { type: 'text', text: '@example.com', cache_control: { type: 'ephemeral' } },
];

describe('a run of text parts', () => {
  it('merged keeps the fields of its parts, the text the one given', () => {
    const out = mergeSplitTexts({ system, messages: [] }, (texts) => texts.join('').toUpperCase());
    expect(out.system).toEqual([{ type: 'text', text: 'MAIL ME AT JOHN@EXAMPLE.COM', cache_control: { type: 'ephemeral' } }]);
    // Untouched when nothing is merged, and never edited in place.
    const same = { system, messages: [] };
    expect(mergeSplitTexts(same, () => null)).toBe(same);
    expect(system[0]!.text).toBe('mail me at john');
  });

  it('is broken by a part that is not text, and found joined as is or a line apart', () => {
    const content = [{ type: 'text', text: 'project' }, { type: 'image_url', image_url: { url: 'https://x/y.png' } }, { type: 'text', text: 'nightfall' }];
    const fields = { messages: [{ role: 'user', content }] };
    expect(someSplitText(fields, (t) => /project\s+nightfall/.test(t))).toBe(false);
    const split = { messages: [{ role: 'user', content: [{ type: 'text', text: 'project' }, { type: 'text', text: 'nightfall' }] }] };
    expect(someSplitText(split, (t) => /project\s+nightfall/.test(t))).toBe(true);
  });

  it('is shown to a moderation once, joined', () => {
    const fields = { messages: [{ role: 'user', content: [{ type: 'text', text: 'one ' }, { type: 'text', text: 'two' }] }, { role: 'user', content: 'three' }] };
    expect(promptTexts(joinSplitTexts(fields))).toEqual(['one two', 'three']);
  });
});
