/** Reading a JSON config file, with "${NAME}" strings replaced by environment variables. */
import { readFile } from 'node:fs/promises';
import { ConfigError } from './options.js';

function substitute(value: unknown, env: NodeJS.ProcessEnv, path: string): unknown {
  if (typeof value === 'string') {
    const m = /^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$/.exec(value);
    if (!m) return value;
    const name = m[1]!;
    const v = env[name];
    if (v === undefined) throw new ConfigError(`${path || '(root)'}: environment variable ${name} is not set`);
    return v;
  }
  if (Array.isArray(value)) return value.map((v, i) => substitute(v, env, `${path}.${i}`));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = substitute(v, env, path ? `${path}.${k}` : k);
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
  } catch (err) {
    throw new ConfigError(`config file ${file} is not valid JSON: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError(`config file ${file} must hold a JSON object`);
  return substitute(parsed, env, '') as Record<string, unknown>;
}
