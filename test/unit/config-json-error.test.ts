/**
 * A config file that is not JSON: the error gives the line and column of the first character
 * that does not fit and says what was expected there (Node's own message gives an offset at
 * best, or echoes the file's text, secrets included).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../src/cli/config-file.js';
import { jsonSyntaxError } from '../../src/cli/json-error.js';
import { ConfigError } from '../../src/options.js';

const dir = mkdtempSync(join(tmpdir(), 'mg-json-'));
let n = 0;
async function errorOf(text: string): Promise<ConfigError> {
  const path = join(dir, `config-${n++}.json`);
  writeFileSync(path, text);
  const err = await loadConfigFile(path, {}).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(ConfigError);
  return err as ConfigError;
}

describe('a config file that is not valid JSON', () => {
  it('names the line and column, and what was expected there', async () => {
    const text = ['{', '  "upstreams": {', '    "openai": { "baseUrl": "https://api.openai.com/v1", "apiKey": "sk-secret-123" }', '  }', '  "models": []', '}'].join('\n');
    const err = await errorOf(text);
    expect(err.message).toMatch(/is not valid JSON at line 5, column 3: expected ',' or '}', found '"'$/);
    // Nothing of the file's text (its secrets) is echoed.
    expect(err.message).not.toContain('sk-secret-123');
  });

  it('a value cut off, a trailing comma, single quotes, a line break in a string, text after the value', async () => {
    expect((await errorOf('{\n  "port": tru\n}')).message).toMatch(/at line 2, column 11: expected a value/);
    expect((await errorOf('{\n  "a": [1, 2,],\n}')).message).toMatch(/at line 2, column 14: expected a value after ',' \(no ',' before '\]'\)/);
    expect((await errorOf("{'a': 1}")).message).toMatch(/at line 1, column 2: expected a double-quoted property name/);
    expect((await errorOf('{"a": "x\ny"}')).message).toMatch(/at line 1, column 9: a line break .* inside a string/);
    expect((await errorOf('{}\n}')).message).toMatch(/at line 2, column 1: expected the end of the file after the value/);
    expect((await errorOf('{"a": ')).message).toMatch(/at line 1, column 7: .*found the end of the file/);
  });

  it('finds no error in what JSON.parse accepts', () => {
    for (const text of ['{}', ' [1, -2.5e-3, 0, "\\u00e9\\n", true, false, null, {"a": {}}] ', '"x"', '0']) {
      expect(() => JSON.parse(text)).not.toThrow();
      expect(jsonSyntaxError(text), text).toBeNull();
    }
    for (const text of ['{"a": 01}', '[1.]', '[-]', '{"a" 1}', '["\\x"]', '', '[1 2]', '{"a":1,,"b":2}']) {
      expect(() => JSON.parse(text), text).toThrow();
      expect(jsonSyntaxError(text), text).not.toBeNull();
    }
  });
});
