/**
 * Output guardrails on a plain answer: its texts (chat's `message.content`, and its
 * reasoning and refusal, completions'
 * `text`, Responses' `output_text` parts, Messages' text blocks) redacted, or cut at a block
 * and the answer ended as OpenAI ends filtered output (`finish_reason: "content_filter"`;
 * Responses `status: "incomplete"` with `incomplete_details.reason: "content_filter"`;
 * Messages `stop_reason: "refusal"`). It rewrites a copy the client gets: the answer the
 * upstream produced was billed before, as it came.
 */
import { CHAT_SIDE_TEXTS, type OnAct, type OutputFormat } from './output-stream.js';
import { type OutputFinder, scanWhole } from './scanner.js';

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One text through the guardrails: what is left of it, and whether it was blocked there. */
export type TextCheck = (text: string) => { text: string; blocked: boolean };

/** The configured output guardrails' check of one text, telling `onAct` once per guardrail that acted. */
export function findersCheck(finders: readonly OutputFinder[], onAct: OnAct): TextCheck {
  const acted = new Set<string>();
  return (text) => {
    const r = scanWhole(finders, text);
    for (const id of r.redactedBy) {
      if (acted.has(id)) continue;
      acted.add(id);
      onAct(id, 'redact');
    }
    if (r.blocked !== null) onAct(r.blocked, 'block');
    return { text: r.text, blocked: r.blocked !== null };
  };
}

/** The answer the client gets, or null when `check` changed nothing. */
export function guardAnswer(format: OutputFormat, answer: Json, checkText: TextCheck): Json | null {
  let changed = false;
  const check: TextCheck = (text) => {
    const r = checkText(text);
    if (r.text !== text) changed = true;
    return r;
  };
  let out: Json;
  if (format === 'chat' || format === 'completions') {
    if (!Array.isArray(answer.choices)) return null;
    const choices = answer.choices.map((c: unknown) => {
      if (!isObject(c)) return c;
      const message = isObject(c.message) ? c.message : null;
      if (format === 'chat') {
        if (!message) return c;
        // The reasoning a provider shows and a refusal are read as the content is, in the
        // order the model wrote them; after a block, nothing more of the message is shown.
        let shown: Json = message;
        let blocked = false;
        for (const field of [...CHAT_SIDE_TEXTS, 'content']) {
          const text = message[field];
          if (typeof text !== 'string') continue;
          if (blocked) {
            if (text !== '') shown = { ...shown, [field]: '' };
            continue;
          }
          const r = check(text);
          if (r.text !== text) shown = { ...shown, [field]: r.text };
          blocked = r.blocked;
        }
        if (shown === message && !blocked) return c;
        changed = true;
        const next: Json = { ...c, message: shown };
        if ('logprobs' in next) next.logprobs = null;
        if (blocked) next.finish_reason = 'content_filter';
        return next;
      }
      const text = c.text;
      if (typeof text !== 'string') return c;
      const r = check(text);
      const next: Json = { ...c, text: r.text };
      if ('logprobs' in next && r.text !== text) next.logprobs = null;
      if (r.blocked) next.finish_reason = 'content_filter';
      return next;
    });
    out = { ...answer, choices };
  } else if (format === 'responses') {
    if (!Array.isArray(answer.output)) return null;
    let blocked = false;
    const output: unknown[] = [];
    for (const item of answer.output) {
      if (blocked) break;
      if (!isObject(item) || !Array.isArray(item.content)) {
        output.push(item);
        continue;
      }
      const content: unknown[] = [];
      for (const part of item.content) {
        if (blocked) break;
        if (!isObject(part) || part.type !== 'output_text' || typeof part.text !== 'string') {
          content.push(part);
          continue;
        }
        const r = check(part.text);
        blocked = r.blocked;
        content.push(r.text === part.text ? part : { ...part, text: r.text, logprobs: [] });
      }
      output.push({ ...item, content });
    }
    out = { ...answer, output };
    if (typeof answer.output_text === 'string') out.output_text = check(answer.output_text).text;
    if (blocked) Object.assign(out, { status: 'incomplete', incomplete_details: { reason: 'content_filter' } });
    changed ||= blocked;
  } else {
    if (!Array.isArray(answer.content)) return null;
    let blocked = false;
    const content: unknown[] = [];
    for (const block of answer.content) {
      if (blocked) break;
      if (!isObject(block) || block.type !== 'text' || typeof block.text !== 'string') {
        content.push(block);
        continue;
      }
      const r = check(block.text);
      blocked = r.blocked;
      content.push(r.text === block.text ? block : { ...block, text: r.text });
    }
    out = { ...answer, content };
    if (blocked) Object.assign(out, { stop_reason: 'refusal', stop_sequence: null });
    changed ||= blocked;
  }
  return changed ? out : null;
}

/** Every text of a plain answer (what a plugin's onOutput hook is shown). */
export function answerTexts(format: OutputFormat, answer: Json): string[] {
  const out: string[] = [];
  if (format === 'chat') {
    // Every text the client reads of a message, as guardAnswer reads them: the reasoning a
    // provider shows and a refusal too, not only the content.
    for (const c of Array.isArray(answer.choices) ? answer.choices : []) {
      const message = isObject(c) && isObject(c.message) ? c.message : null;
      for (const field of [...CHAT_SIDE_TEXTS, 'content']) if (message && typeof message[field] === 'string' && message[field] !== '') out.push(message[field]);
    }
  } else if (format === 'completions') {
    for (const c of Array.isArray(answer.choices) ? answer.choices : []) if (isObject(c) && typeof c.text === 'string') out.push(c.text);
  } else if (format === 'responses') {
    for (const item of Array.isArray(answer.output) ? answer.output : []) {
      for (const part of isObject(item) && Array.isArray(item.content) ? item.content : []) if (isObject(part) && part.type === 'output_text' && typeof part.text === 'string') out.push(part.text);
    }
  } else {
    for (const block of Array.isArray(answer.content) ? answer.content : []) if (isObject(block) && block.type === 'text' && typeof block.text === 'string') out.push(block.text);
  }
  return out;
}
