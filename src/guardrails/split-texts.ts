/**
 * Text split over parts: a message's content given as several text parts (chat's `text`,
 * Responses' `input_text`, Messages' text blocks and `system` blocks) is read by the model as
 * one text, so "project" and " nightfall" in two parts say what one part saying both would. A
 * guardrail that read each part alone would let it by; these read every run of adjacent text
 * parts joined.
 */

const TEXT_PARTS = new Set(['text', 'input_text']);
const PROMPT_FIELDS = ['messages', 'system', 'instructions', 'input', 'prompt'] as const;
/** Deeper than any API's shape of a message's parts. */
const MAX_DEPTH = 8;

type TextPart = { type: string; text: string } & Record<string, unknown>;
const isTextPart = (v: unknown): v is TextPart =>
  !!v && typeof v === 'object' && TEXT_PARTS.has((v as { type?: unknown }).type as string) && typeof (v as { text?: unknown }).text === 'string';

/**
 * `fields` with each run of two or more adjacent text parts that `merge` takes (it returns the
 * one text that replaces the run's, given their texts; null leaves the run) made one part: the
 * first part's, with that text. The same object when no run was merged; never edits in place.
 */
export function mergeSplitTexts(fields: Record<string, unknown>, merge: (texts: string[]) => string | null): Record<string, unknown> {
  let out: Record<string, unknown> | null = null;
  for (const name of PROMPT_FIELDS) {
    if (!Object.hasOwn(fields, name)) continue;
    const next = mapRuns(fields[name], merge, 0);
    if (next !== fields[name]) (out ??= { ...fields })[name] = next;
  }
  return out ?? fields;
}

/** Whether `test` holds for the joined text of some run of adjacent text parts (joined as is, and a line apart). */
export function someSplitText(fields: Record<string, unknown>, test: (text: string) => boolean): boolean {
  let found = false;
  mergeSplitTexts(fields, (texts) => {
    if (!found && (test(texts.join('')) || test(texts.join('\n')))) found = true;
    return null;
  });
  return found;
}

/** `fields` with every run of adjacent text parts made one part (what a moderation reads, each text once). */
export function joinSplitTexts(fields: Record<string, unknown>): Record<string, unknown> {
  return mergeSplitTexts(fields, (texts) => texts.join(''));
}

function mapRuns(value: unknown, merge: (texts: string[]) => string | null, depth: number): unknown {
  if (depth >= MAX_DEPTH || !value || typeof value !== 'object') return value;
  if (!Array.isArray(value)) {
    const object = value as Record<string, unknown>;
    let out: Record<string, unknown> | null = null;
    for (const key of Object.keys(object)) {
      const next = mapRuns(object[key], merge, depth + 1);
      if (next !== object[key]) (out ??= { ...object })[key] = next;
    }
    return out ?? value;
  }
  let changed = false;
  const items = value.map((item) => {
    const next = mapRuns(item, merge, depth + 1);
    if (next !== item) changed = true;
    return next;
  });
  const out: unknown[] = [];
  for (let i = 0; i < items.length; ) {
    let j = i;
    while (j < items.length && isTextPart(items[j])) j++;
    if (j - i >= 2) {
      const run = items.slice(i, j) as TextPart[];
      const merged = merge(run.map((p) => p.text));
      if (merged !== null) {
        // Every part's other fields (a cache breakpoint on the last part stays at the run's end).
        out.push(Object.assign({}, ...run, { text: merged }));
        changed = true;
        i = j;
        continue;
      }
    }
    if (j === i) j = i + 1;
    for (let k = i; k < j; k++) out.push(items[k]);
    i = j;
  }
  return changed ? out : value;
}
