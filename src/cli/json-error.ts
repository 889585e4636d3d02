/**
 * Where a text stops being JSON, as a line and column, for a config file that `JSON.parse`
 * refused. Node's own message gives at most an offset ("at position 2880"), sometimes only the
 * text itself (which may hold secrets, and is the whole file); this scanner walks the JSON
 * grammar (RFC 8259) and stops at the first character that does not fit.
 */

/** The first syntax error of `text`, or null when it is JSON. */
export function jsonSyntaxError(text: string): { line: number; column: number; problem: string } | null {
  const at = firstError(text);
  if (!at) return null;
  const before = text.slice(0, at.offset);
  const line = before.split('\n').length;
  const column = at.offset - before.lastIndexOf('\n');
  return { line, column, problem: at.problem };
}

class Stop {
  constructor(
    readonly offset: number,
    readonly problem: string,
  ) {}
}

function firstError(text: string): Stop | null {
  let i = 0;
  const found = () => (i >= text.length ? 'the end of the file' : text[i] === '\n' ? 'a line break' : `'${text[i]}'`);
  const fail = (expected: string): never => {
    throw new Stop(i, `expected ${expected}, found ${found()}`);
  };
  const space = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++;
  };
  const digits = () => {
    const start = i;
    while (i < text.length && text[i]! >= '0' && text[i]! <= '9') i++;
    if (i === start) fail('a digit');
  };
  const string = () => {
    if (text[i] !== '"') fail('a double-quoted string');
    i++;
    for (;;) {
      if (i >= text.length) fail('the closing \'"\' of the string');
      const c = text[i]!;
      if (c === '"') return void i++;
      if (c < ' ') throw new Stop(i, 'a line break or other control character inside a string: write it as \\n, \\t or \\uXXXX');
      if (c === '\\') {
        i++;
        if (text[i] === 'u') {
          i++;
          for (let k = 0; k < 4; k++, i++) if (!/[0-9a-fA-F]/.test(text[i] ?? '')) fail('4 hex digits after \\u');
          continue;
        }
        if (!'"\\/bfnrt'.includes(text[i] ?? 'x')) fail('an escape (\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)');
      }
      i++;
    }
  };
  const value = (): void => {
    space();
    const c = text[i];
    if (c === '{') {
      members('}', () => {
        string();
        space();
        if (text[i] !== ':') fail("':' after the property name");
        i++;
        value();
      });
      return;
    }
    if (c === '[') {
      members(']', value);
      return;
    }
    if (c === '"') {
      string();
      return;
    }
    for (const word of ['true', 'false', 'null']) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return;
      }
    }
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) {
      if (c === '-') i++;
      if (text[i] === '0') i++;
      else digits();
      if (text[i] === '.') {
        i++;
        digits();
      }
      if (text[i] === 'e' || text[i] === 'E') {
        i++;
        if (text[i] === '+' || text[i] === '-') i++;
        digits();
      }
      return;
    }
    fail('a value (an object, array, string, number, true, false or null)');
  };
  /** An object's or array's items, each read by `item`, separated by commas, no trailing comma. */
  const members = (close: string, item: () => void) => {
    i++;
    space();
    if (text[i] === close) return void i++;
    for (;;) {
      if (close === '}') space();
      if (close === '}' && text[i] !== '"') fail(`a double-quoted property name${text[i] === close ? " (no ',' before '}')" : ''}`);
      item();
      space();
      if (text[i] === ',') {
        i++;
        space();
        if (text[i] === close) fail(`a value after ',' (no ',' before '${close}')`);
        continue;
      }
      if (text[i] === close) return void i++;
      fail(`',' or '${close}'`);
    }
  };
  try {
    value();
    space();
    if (i < text.length) fail('the end of the file after the value');
    return null;
  } catch (err) {
    if (err instanceof Stop) return err;
    // Nesting deeper than the stack: no position to give.
    if (err instanceof RangeError) return null;
    throw err;
  }
}
