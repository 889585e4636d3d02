/**
 * A configured guardrail compiled once, at start: whom it covers, what it finds in a text,
 * and what it does about it (redact the matches, or refuse the call).
 */
import { allowsModel } from '../catalog/allow-list.js';
import type { GuardrailConfig } from '../options/guardrails.js';
import { detectorsFor } from './entities.js';

export interface Guardrail {
  id: string;
  action: 'redact' | 'block';
  /** Whether it covers a call of `account` to `model`. */
  covers(account: string, model: string): boolean;
  /** `text` with every match replaced by its marker (the same string when nothing matched). */
  redact(text: string): string;
  /** Whether `text` holds a match. */
  finds(text: string): boolean;
}

interface Finder {
  pattern: RegExp;
  valid?: ((candidate: string) => boolean) | undefined;
  marker: string;
}

export function compileGuardrail(cfg: GuardrailConfig): Guardrail {
  const finders: Finder[] =
    cfg.kind === 'pii'
      ? detectorsFor(cfg.entities).map((d) => ({ pattern: d.pattern, valid: d.valid, marker: `[REDACTED:${d.entity.toUpperCase()}]` }))
      : cfg.patterns.map((p) => ({ pattern: new RegExp(p, cfg.ignoreCase ? 'gui' : 'gu'), marker: '[REDACTED]' }));
  const accounts = cfg.accounts ? new Set(cfg.accounts) : null;
  return {
    id: cfg.id,
    action: cfg.action,
    covers: (account, model) => (!accounts || accounts.has(account)) && allowsModel(cfg.models, model),
    redact(text) {
      let out = text;
      for (const f of finders) {
        // An empty match (a lookaround-only pattern) is no text to hide: it stays as it is.
        out = out.replace(f.pattern, (match) => (match.length > 0 && (!f.valid || f.valid(match)) ? f.marker : match));
      }
      return out;
    },
    finds(text) {
      return finders.some((f) => {
        for (const m of text.matchAll(f.pattern)) if (m[0].length > 0 && (!f.valid || f.valid(m[0]))) return true;
        return false;
      });
    },
  };
}
