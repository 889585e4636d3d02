/**
 * Gemini answers (`generateContent`, `streamGenerateContent`) read into the answer model. Each
 * streamed event's `usageMetadata` is a running total: it is final only when no output came
 * after it. Output is every candidate's parts: text, thoughts, function calls and inline data.
 */
import { type AnswerAccount, plainAccount } from '../../billing/answer.js';
import { addChoice, collectOutput, isNoOutput, noOutput, type OutputCount } from '../../billing/output.js';
import { isCount, type Usage, usageOfParts } from '../../billing/usage.js';
import { isObject } from '../kinds/shared.js';
import { RunningAccount } from './account.js';

const count = (v: unknown): number => (isCount(v) ? v : 0);

/**
 * `usageMetadata` as the gateway's usage: the prompt is every input token (the cached ones and
 * a tool's prompt included), the completion the candidates' tokens and the thinking ones. Null
 * without a valid prompt count, or when the output count is malformed (then output is counted).
 */
export function geminiUsage(meta: unknown): Usage | null {
  if (!isObject(meta) || !isCount(meta.promptTokenCount)) return null;
  const candidates = meta.candidatesTokenCount;
  if (candidates !== undefined && !isCount(candidates)) return null;
  const reasoning = count(meta.thoughtsTokenCount);
  return usageOfParts({
    prompt: meta.promptTokenCount + count(meta.toolUsePromptTokenCount),
    completion: count(candidates) + reasoning,
    cachedPrompt: count(meta.cachedContentTokenCount),
    reasoning,
  });
}

/**
 * The output of a Gemini answer's (or event's) candidates: every part but a thought's
 * signature into `into`, and the visible parts alone (not thoughts) into `visible`.
 */
function candidatesOutput(candidates: unknown, into: OutputCount, visible?: OutputCount): OutputCount {
  const list = Array.isArray(candidates) ? candidates : [];
  for (let i = 0; i < list.length; i++) {
    const c: unknown = list[i];
    const index = isObject(c) && typeof c.index === 'number' && Number.isSafeInteger(c.index) ? c.index : i;
    // Candidates (`candidateCount`) are counted apart, as chat's choices are: streamed, their
    // parts interleave, and one candidate's words must not join another's.
    const all = index === 0 ? into : noOutput();
    const seen = index === 0 || !visible ? visible : noOutput();
    const parts = isObject(c) && isObject(c.content) ? c.content.parts : undefined;
    for (const part of Array.isArray(parts) ? parts : []) {
      if (!isObject(part)) continue;
      const { thoughtSignature: _signature, thought, ...output } = part;
      collectOutput(output, all);
      if (seen && thought !== true) collectOutput(output, seen);
    }
    if (all !== into) addChoice(into, index, all);
    if (visible && seen && seen !== visible) addChoice(visible, index, seen);
  }
  return into;
}

/**
 * A report without `candidatesTokenCount` counts only the thoughts: Gemini leaves the field out
 * when the answer has no visible output, so with visible output it did not count it. That
 * output is billed on top of the report, counted (the report's thinking is not in the text).
 */
const countsNoCandidates = (meta: unknown) => isObject(meta) && meta.candidatesTokenCount === undefined;

const isEmpty = isNoOutput;

/** A plain `generateContent` answer's account. */
export function geminiAnswerAccount(body: Record<string, unknown>): AnswerAccount {
  const visible = noOutput();
  const all = candidatesOutput(body.candidates, noOutput(), visible);
  const account = plainAccount(geminiUsage(body.usageMetadata), () => all);
  const uncounted = account.usage !== null && countsNoCandidates(body.usageMetadata) && !isEmpty(visible);
  return uncounted ? { ...account, unreported: () => visible } : account;
}

/** A Gemini stream's account, fed each parsed event. */
export class GeminiAccount extends RunningAccount {
  /** The visible output so far (every part but thoughts). */
  private readonly visible = noOutput();
  private lastCountsNoCandidates = false;

  unreported(): OutputCount {
    return this.usage !== null && this.lastCountsNoCandidates ? this.visible : noOutput();
  }

  read(event: Record<string, unknown>): void {
    this.addCount(candidatesOutput(event.candidates, noOutput(), this.visible));
    const usage = geminiUsage(event.usageMetadata);
    if (usage) this.lastCountsNoCandidates = countsNoCandidates(event.usageMetadata);
    // Every candidate's finish reason, or a blocked prompt, ends the content (the usage may
    // still come after it, in an event of its own).
    const candidates = Array.isArray(event.candidates) ? event.candidates : [];
    candidates.forEach((c, i) => {
      if (isObject(c)) this.choice(typeof c.index === 'number' ? c.index : i, c.finishReason !== undefined && c.finishReason !== null);
    });
    if (isObject(event.promptFeedback) && event.promptFeedback.blockReason) this.contentEnded();
    this.report(usage);
  }
}
