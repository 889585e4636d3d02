/** The CLI's flags checked in our words before parseArgs reads them. */
import { describe, expect, it } from 'vitest';
import { flagProblem } from '../../src/cli/flags.js';

const known = {
  config: { type: 'string' },
  port: { type: 'string' },
  usd: { type: 'string' },
  'monthly-cap': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

describe('flagProblem', () => {
  it('names the nearest known flag for an unknown one', () => {
    expect(flagProblem(['serve', '--config', 'f.json', '--prot', '9000'], known)).toBe('unknown option --prot; did you mean --port?');
    expect(flagProblem(['--monthy-cap=5'], known)).toBe('unknown option --monthy-cap; did you mean --monthly-cap?');
    expect(flagProblem(['--verbose'], known)).toBe('unknown option --verbose');
    expect(flagProblem(['-x'], known)).toBe('unknown option -x');
  });

  it('says when a flag that takes a value has none', () => {
    expect(flagProblem(['serve', '--config'], known)).toBe('--config needs a value');
    expect(flagProblem(['serve', '--config', '--port', '1'], known)).toBe('--config needs a value');
  });

  it('refuses an empty value (an unset variable: --port "$PORT"), never reading it as the default', () => {
    expect(flagProblem(['serve', '--config', 'f.json', '--port', ''], known)).toBe('--port must not be empty');
    expect(flagProblem(['serve', '--port=', '--config', 'f.json'], known)).toBe('--port must not be empty');
    expect(flagProblem(['serve', '--config', ' ', '--port', '1'], known)).toBe('--config must not be empty');
  });

  it('lets through what parseArgs reads: values, negative amounts, --flag=value, short flags, a "--" end', () => {
    expect(flagProblem(['wallet', 'top-up', '--usd', '-5', '--config=f.json', '-h'], known)).toBeNull();
    expect(flagProblem(['serve', '--', '--anything'], known)).toBeNull();
  });
});
