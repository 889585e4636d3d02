/**
 * A configured guardrail compiled once, at start: whom it covers, what it finds in a text,
 * and what it does about it (redact the matches, or refuse the call).
 */
import { allowsModel } from '../catalog/allow-list.js';
import type { GuardrailConfig } from '../options/guardrails.js';
import { detectorsFor } from './entities.js';
import { DEFAULT_MAX_SPAN, regexSpan } from './span.js';

/** One thing a guardrail looks for. */
export interface Finder {
  /** Global. */
  pattern: RegExp;
  valid?: ((candidate: string) => boolean) | undefined;
  /** Where in a candidate the entity is, when it may be only part of it. */
  within?: ((candidate: string) => readonly [number, number] | null) | undefined;
  marker: string;
  /** The most characters a match spans: what a stream holds back for it. */
  span: number;
  /** A match never holds whitespace (a stream holds back only the word being written). */
  word: boolean;
  /** What every match holds, when known: a text without it is not searched. */
  needs?: RegExp | undefined;
}

export interface Guardrail {
  id: string;
  action: 'redact' | 'block';
  /** What it looks for (none for a moderation guardrail: its upstream decides). */
  finders: readonly Finder[];
  /** Whether it covers a call of `account` to `model`. */
  covers(account: string, model: string): boolean;
  /** `text` with every match replaced by its marker (the same string when nothing matched). */
  redact(text: string): string;
  /** Whether `text` holds a match. */
  finds(text: string): boolean;
}

/**
 * Where the entity is in a match ([from, to] within it), or null when the match is none: an
 * empty match (a lookaround-only pattern hides no text), or one that fails its check.
 */
export function locate(f: Finder, match: string): readonly [number, number] | null {
  if (match.length === 0) return null;
  if (f.within) return f.within(match);
  return !f.valid || f.valid(match) ? [0, match.length] : null;
}

export function compileGuardrail(cfg: GuardrailConfig): Guardrail {
  const finders: Finder[] =
    cfg.kind === 'pii'
      ? detectorsFor(cfg.entities).map((d) => ({
          pattern: d.pattern,
          valid: d.valid,
          within: d.within,
          marker: `[REDACTED:${d.entity.toUpperCase()}]`,
          span: d.span,
          word: d.word === true,
          needs: d.needs,
        }))
      : cfg.kind === 'regex'
        ? cfg.patterns.map((p) => ({
            pattern: new RegExp(p, cfg.ignoreCase ? 'gui' : 'gu'),
            marker: '[REDACTED]',
            span: regexSpan(p) ?? cfg.maxSpan ?? DEFAULT_MAX_SPAN,
            word: false,
          }))
        : [];
  const accounts = cfg.accounts ? new Set(cfg.accounts) : null;
  return {
    id: cfg.id,
    action: cfg.kind === 'moderation' ? 'block' : cfg.action,
    finders,
    covers: (account, model) => (!accounts || accounts.has(account)) && allowsModel(cfg.models, model),
    redact(text) {
      let out = text;
      for (const f of finders) {
        out = out.replace(f.pattern, (match) => {
          const at = locate(f, match);
          return at ? match.slice(0, at[0]) + f.marker + match.slice(at[1]) : match;
        });
      }
      return out;
    },
    finds(text) {
      return finders.some((f) => {
        for (const m of text.matchAll(f.pattern)) if (locate(f, m[0])) return true;
        return false;
      });
    },
  };
}
