/**
 * The command line's flags checked before parseArgs reads them, so a mistake gets one line in
 * our words: an unknown flag names the nearest known one (`--prot` -> `--port`), and a flag
 * that takes a value says so when none follows it.
 */
import { closest } from '../options/issues.js';

export type FlagSpec = Record<string, { type: 'string' | 'boolean'; short?: string }>;

/** What is wrong with the flags of `argv`, or null when parseArgs may read them. */
export function flagProblem(argv: readonly string[], known: FlagSpec): string | null {
  const shorts = new Map(Object.entries(known).flatMap(([name, spec]) => (spec.short ? [[spec.short, name] as const] : [])));
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return null;
    // A lone "-" and negative numbers are values (a negative amount is refused by its own check).
    if (!arg.startsWith('-') || arg === '-' || /^-\d/.test(arg)) continue;
    const long = arg.startsWith('--');
    const name = long ? arg.slice(2).split('=')[0]! : (shorts.get(arg.slice(1)) ?? '');
    const spec = known[name];
    if (!spec) {
      const given = long ? name : arg.slice(1);
      const near = closest(given, Object.keys(known));
      return `unknown option ${long ? '--' : '-'}${given}${near ? `; did you mean --${near}?` : ''}`;
    }
    if (spec.type === 'string') {
      const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : argv[i + 1];
      if (!arg.includes('=')) {
        if (value === undefined || (value.startsWith('-') && !/^-\d/.test(value))) return `--${name} needs a value`;
        i++;
      }
      // An empty value is a variable that was not set (`--host "$HOST"`): for --host it would
      // even bind every interface. It is refused, never taken as the default.
      if (value !== undefined && value.trim() === '') return `--${name} must not be empty`;
    }
  }
  return null;
}
