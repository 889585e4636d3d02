/**
 * Config errors a person can act on: each problem is the field's path in JS notation
 * (`models[0].pricing.prompt`) and a plain sentence saying what was expected and what was
 * given; an unknown key or option names the nearest known one ("did you mean ...?").
 *
 * zod's own messages ("Invalid input", "Unrecognized key") are replaced; a message the schema
 * words itself (a regex's "must be a Redis URL ...", a refinement's rule) is kept, with the
 * value it got.
 */
import type { z } from 'zod';

type Issue = z.core.$ZodIssue;
type Path = readonly PropertyKey[];

/** Credentials inside a URL (`redis://user:secret@host`), as a message shows them: starred. */
const URL_CREDENTIALS = /(\/\/[^/@\s:]*:)[^@\s/]*@/g;

/**
 * A value as a sentence names it: `the number 1.5e-7`, `the string "abc"`, `a list`. A secret
 * (`secret`: the field holds a key, a token or a header) is never shown, only its length and
 * whether it has a line break (the usual fault: an environment file written with echo); a URL's
 * password is starred wherever it appears.
 */
export function describeValue(value: unknown, secret = false): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (typeof value === 'string' && secret) {
    return `a string of ${value.length} characters${/[\r\n]/.test(value) ? ' with a line break' : ''} (not shown: it is a secret)`;
  }
  if (typeof value === 'string') {
    const shown = value.replace(URL_CREDENTIALS, '$1***@');
    return `the string ${JSON.stringify(shown.length > 60 ? `${shown.slice(0, 60)}...` : shown)}`;
  }
  if (typeof value === 'number' || typeof value === 'bigint') return `the number ${String(value)}`;
  if (typeof value === 'boolean') return `the boolean ${value}`;
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/**
 * Fields whose value is a secret: an upstream's or a client's key, a token, a password, and
 * every value of an upstream's `headers` and `query` (an Azure `api-key` lives there).
 */
const SECRET_FIELD = /^(apiKey|key|token|tokenSha256|password|secret|authorization)$/i;
const isSecretPath = (path: Path) => path.some((p) => typeof p === 'string' && (SECRET_FIELD.test(p) || p === 'headers' || p === 'query'));

/** A path in JS notation: `models[0].pricing.prompt`, `upstreams["my-upstream"].apiKey`. */
export function jsPath(path: Path): string {
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else if (typeof p === 'string' && /^[A-Za-z_$][\w$]*$/.test(p)) out += out ? `.${p}` : p;
    else out += `[${JSON.stringify(String(p))}]`;
  }
  return out || '(root)';
}

/**
 * The known name closest to `given` when it is near enough to be a typo (case ignored; a swap
 * of two neighbouring letters counts as one edit), else null.
 */
export function closest(given: string, known: readonly string[]): string | null {
  const g = given.toLowerCase();
  const limit = g.length <= 3 ? 1 : g.length <= 8 ? 2 : 3;
  let best: string | null = null;
  let bestDistance = limit + 1;
  for (const k of known) {
    const d = editDistance(g, k.toLowerCase());
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  return best;
}

/** Edits (insert, delete, replace, swap of neighbours) that turn `a` into `b`. */
function editDistance(a: string, b: string): number {
  const rows: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) rows[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      rows[i]![j] = d;
    }
  }
  return rows[a.length]![b.length]!;
}

const describeShown = (value: unknown, secret: boolean) => describeValue(value, secret);

/** One line per problem, `path: sentence`. */
export function formatIssues(issues: readonly Issue[], schema: z.ZodType, input: unknown): string[] {
  return issues.flatMap((issue) => lines(issue, [], schema, input));
}

/** zod's built-in wording, which the sentences below replace. */
const ZOD_WORDING = /^(Invalid|Too (small|big)|Unrecognized key)/;

function lines(issue: Issue, prefix: Path, schema: z.ZodType, input: unknown): string[] {
  const path = [...prefix, ...issue.path];
  if (issue.code === 'invalid_union' && issue.errors.length > 0) {
    // The alternative the value came closest to (fewest problems; the first on a tie) says
    // what is wrong; listing every alternative's problems would bury it.
    const best = issue.errors.reduce((a, b) => (b.length < a.length ? b : a));
    if (best.length > 0) return best.flatMap((inner) => lines(inner, path, schema, input));
  }
  if (issue.code === 'invalid_key' && issue.issues.length > 0) {
    // A record's key refused by its own rule: the rule's sentence, at the key's path.
    return issue.issues.map((inner) => `${jsPath(path)}: ${sentence(inner as Issue, isSecretPath(path))}`);
  }
  if (issue.code === 'unrecognized_keys') {
    const known = knownKeys(schema, path, input);
    return issue.keys.map((key) => {
      const near = closest(key, known);
      return `${jsPath(path)}: ${JSON.stringify(key)} is not a known key${near ? `; did you mean ${JSON.stringify(near)}?` : ''}`;
    });
  }
  return [`${jsPath(path)}: ${sentence(issue, isSecretPath(path))}`];
}

function sentence(issue: Issue, secret = false): string {
  const got = 'input' in issue ? issue.input : undefined;
  const given = 'input' in issue && issue.input !== undefined;
  const describeValue = (v: unknown) => describeShown(v, secret);
  if (!ZOD_WORDING.test(issue.message)) {
    const shown = given && typeof got !== 'object' && !/\bgot\b/.test(issue.message);
    return shown ? `${issue.message}; got ${describeValue(got)}` : issue.message;
  }
  switch (issue.code) {
    case 'invalid_union': {
      // A discriminated union whose discriminator (a storage's `driver`) names no alternative.
      const { discriminator, options } = issue as { discriminator?: string; options?: unknown[] };
      if (discriminator === undefined || !options) break;
      const value = got !== null && typeof got === 'object' ? (got as Record<string, unknown>)[discriminator] : undefined;
      return oneOf(options, value, value !== undefined, secret);
    }
    case 'invalid_type':
      return given ? `expected ${article(issue.expected)}, got ${describeValue(got)}` : `missing; expected ${article(issue.expected)}`;
    case 'invalid_value':
      return oneOf(issue.values, got, given, secret);
    case 'too_small':
    case 'too_big':
      return bound(issue, got, secret);
    case 'invalid_format':
      return issue.format === 'url'
        ? `expected an http or https URL such as "https://api.example.com/v1", got ${describeValue(got)}`
        : `expected ${article(issue.format)}, got ${describeValue(got)}`;
  }
  return given ? `${issue.message.replace(/^Invalid input$/, 'not a valid value')}, got ${describeValue(got)}` : issue.message;
}

/** "expected one of "a", "b", got ...", with the nearest option when the value looks like a typo of one. */
function oneOf(options: readonly unknown[], got: unknown, given: boolean, secret: boolean): string {
  const describeValue = (v: unknown) => describeShown(v, secret);
  const list = options.map((v) => JSON.stringify(v)).join(', ');
  const expected = options.length === 1 ? `expected ${list}` : `expected one of ${list}`;
  if (!given) return `missing; ${expected}`;
  const near = typeof got === 'string' && !secret ? closest(got, options.filter((v): v is string => typeof v === 'string')) : null;
  return `${expected}, got ${describeValue(got)}${near ? `; did you mean ${JSON.stringify(near)}?` : ''}`;
}

function bound(issue: Extract<Issue, { code: 'too_small' | 'too_big' }>, got: unknown, secret: boolean): string {
  const describeValue = (v: unknown) => describeShown(v, secret);
  const small = issue.code === 'too_small';
  const limit = Number(small ? (issue as { minimum: number | bigint }).minimum : (issue as { maximum: number | bigint }).maximum);
  const inclusive = issue.inclusive !== false;
  if (issue.origin === 'string') {
    return small && limit === 1 ? 'must not be empty' : `must have ${small ? 'at least' : 'at most'} ${limit} characters`;
  }
  if (issue.origin === 'array' || issue.origin === 'set') {
    return `must have ${small ? 'at least' : 'at most'} ${limit} item${limit === 1 ? '' : 's'}, got ${Array.isArray(got) ? got.length : describeValue(got)}`;
  }
  const relation = small ? (inclusive ? 'at least' : 'more than') : inclusive ? 'at most' : 'less than';
  return `must be ${relation} ${limit}, got ${describeValue(got)}`;
}

function article(type: string): string {
  if (type === 'array') return 'a list';
  if (type === 'record' || type === 'object') return 'an object';
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

// ---- the keys a schema knows at a path ----------------------------------------------------

type Def = {
  type: string;
  shape?: Record<string, z.ZodType>;
  innerType?: z.ZodType;
  element?: z.ZodType;
  valueType?: z.ZodType;
  options?: z.ZodType[];
  in?: z.ZodType;
  values?: unknown[];
};

const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

const WRAPPERS = new Set(['optional', 'nullable', 'default', 'prefault', 'nonoptional', 'readonly', 'catch']);

/** The schema under its wrappers (optional, default, ...) and pipes. */
function bare(s: z.ZodType): z.ZodType {
  let d = defOf(s);
  while (WRAPPERS.has(d.type) || d.type === 'pipe') {
    s = (d.type === 'pipe' ? d.in : d.innerType)!;
    d = defOf(s);
  }
  return s;
}

/**
 * The object schemas a value at this point may be meant for: a union's alternatives whose
 * literal fields (a storage's `driver`) agree with the value, or all of them when none does.
 */
function objectsFor(s: z.ZodType, value: unknown): z.ZodType[] {
  const b = bare(s);
  const d = defOf(b);
  if (d.type === 'object') return [b];
  if (d.type !== 'union') return [];
  const all = d.options!.flatMap((o) => objectsFor(o, value));
  const agree = all.filter((o) =>
    Object.entries(defOf(o).shape!).some(([k, f]) => {
      const fd = defOf(bare(f));
      return fd.type === 'literal' && value !== null && typeof value === 'object' && fd.values!.includes((value as Record<string, unknown>)[k]);
    }),
  );
  return agree.length ? agree : all;
}

/** The keys the schema knows for the object at `path` of `input`. */
function knownKeys(schema: z.ZodType, path: Path, input: unknown): string[] {
  let here: z.ZodType[] = [schema];
  let value = input;
  for (const p of path) {
    const next: z.ZodType[] = [];
    for (const s of here) {
      const d = defOf(bare(s));
      if (d.type === 'array' && typeof p === 'number') next.push(d.element!);
      else if (d.type === 'record') next.push(d.valueType!);
      else for (const o of objectsFor(s, value)) if (typeof p === 'string' && defOf(o).shape![p]) next.push(defOf(o).shape![p]!);
    }
    here = next;
    value = value !== null && typeof value === 'object' ? (value as Record<PropertyKey, unknown>)[p as string] : undefined;
  }
  return [...new Set(here.flatMap((s) => objectsFor(s, value).flatMap((o) => Object.keys(defOf(o).shape!))))];
}
