/**
 * Reading a JSON config file, with "${NAME}" inside any string replaced by the environment
 * variable NAME ("Bearer ${TOKEN}" works as well as "${TOKEN}"); "$${NAME}" is the literal
 * text "${NAME}".
 *
 * A variable that is unset or empty is an error naming the field and the variable: an empty
 * one is almost always a secret that was not provided (a CI secret missing in a fork, an
 * `export KEY=` with nothing after it), and reading it as "no key" would send requests
 * without their Authorization.
 */
import { readFile } from 'node:fs/promises';
import { ConfigError } from '../options.js';
import { jsPath } from '../options/issues.js';
import { jsonSyntaxError } from './json-error.js';

const REFERENCE = /\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

function substitute(value: unknown, env: NodeJS.ProcessEnv, path: readonly (string | number)[]): unknown {
  if (typeof value === 'string') {
    return value.replace(REFERENCE, (whole, escaped: string, name: string) => {
      if (escaped) return whole.slice(1);
      const v = env[name];
      const where = jsPath(path);
      if (v === undefined) throw new ConfigError(`${where}: environment variable ${name} is not set (write $\${${name}} for the literal text)`);
      if (v === '') throw new ConfigError(`${where}: environment variable ${name} is empty`);
      return v;
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => substitute(v, env, [...path, i]));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = substitute(v, env, [...path, k]);
    return out;
  }
  return value;
}

/** Reads and substitutes a config file; validation happens in createGateway. */
export async function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config file ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Node's message gives an offset at best, or the file's text; a person needs the line.
    const at = jsonSyntaxError(text);
    throw new ConfigError(`config file ${file} is not valid JSON${at ? ` at line ${at.line}, column ${at.column}: ${at.problem}` : ''}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError(`config file ${file} must hold a JSON object`);
  return substitute(parsed, env, []) as Record<string, unknown>;
}
