/**
 * The texts of one guarded answer, each through its own scanner (a chat choice, a Responses
 * content part, a Messages content block), and what each released: shared by the stream
 * rewrites of every API.
 */
import { type OutputFinder, TextScanner } from './scanner.js';

/** Told once per guardrail that acted on an answer (a redaction, a block). */
export type OnAct = (guardrail: string, action: 'redact' | 'block') => void;

export type Json = Record<string, unknown>;
export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

export interface TextsOptions {
  finders: readonly OutputFinder[];
  onAct: OnAct;
  extra: ((text: string) => string) | null;
  blocked: string | null;
}

/** One text's scanner, and what it released. */
export class Text {
  readonly scanner: TextScanner;
  released = '';
  /** Some of its text came (a delta). */
  seen = false;
  /** Its block was told (once). */
  private told = false;
  constructor(private readonly o: TextsOptions) {
    this.scanner = new TextScanner(o.finders);
    if (o.blocked !== null) {
      // Blocked before its first text by a plugin, which was named then.
      this.scanner.blocked = o.blocked;
      this.told = true;
    }
  }
  /** The text to release for `delta` (or, with null, for the text's end). */
  take(delta: string | null): string {
    const s = this.scanner;
    if (delta !== null) this.seen = true;
    const before = s.redactedBy.size;
    let out = delta === null ? s.flush() : s.push(delta);
    if (s.redactedBy.size > before) for (const id of [...s.redactedBy].slice(before)) this.o.onAct(id, 'redact');
    if (s.blocked !== null && !this.told) {
      this.told = true;
      this.o.onAct(s.blocked, 'block');
    }
    if (out && this.o.extra) out = this.o.extra(out);
    this.released += out;
    return out;
  }
  get blocked(): boolean {
    return this.scanner.blocked !== null;
  }
}

export class Texts {
  private readonly texts = new Map<string, Text>();
  constructor(private readonly o: TextsOptions) {}
  of(key: string): Text {
    let t = this.texts.get(key);
    if (!t) this.texts.set(key, (t = new Text(this.o)));
    return t;
  }
  get(key: string): Text | undefined {
    return this.texts.get(key);
  }
  entries(): IterableIterator<[string, Text]> {
    return this.texts.entries();
  }
}

