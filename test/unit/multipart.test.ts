/**
 * The multipart reader does bounded work: every body, random or built to be slow (tens of
 * thousands of repeated header lines, one endless header line, too many parts, parameter
 * floods), is read or refused with 400 `invalid_request`, within a CPU budget proportional to
 * its size. The budget is generous (200 ms per 100 KB, plus a floor) so a loaded machine does
 * not fail it; a quadratic reader misses it by orders of magnitude. CPU time, not wall time,
 * so waiting behind other processes does not count.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/errors.js';
import { MAX_PART_HEADER_BYTES, MAX_PART_HEADER_LINES, MAX_PARTS, readMultipart } from '../../src/operations/videos/multipart.js';

const BOUNDARY = 'b0undary';
const CONTENT_TYPE = `multipart/form-data; boundary=${BOUNDARY}`;
const TEXT = new Set(['model', 'prompt']);

/** CPU milliseconds (user + system) this process may spend on a body of `bytes`. */
const budgetMs = (bytes: number) => 100 + (200 * bytes) / 100_000;

function cpuMs<T>(fn: () => T): { ms: number; outcome: T | GatewayError } {
  const before = process.cpuUsage();
  let outcome: T | GatewayError;
  try {
    outcome = fn();
  } catch (e) {
    // Anything but the gateway's own 400 is a crash.
    if (!(e instanceof GatewayError)) throw e;
    outcome = e;
  }
  const used = process.cpuUsage(before);
  return { ms: (used.user + used.system) / 1000, outcome };
}

/** Reads `body` and checks the outcome: a form, or a 400 invalid_request; within the budget. */
function readWithinBudget(body: Buffer) {
  const { ms, outcome } = cpuMs(() => readMultipart(body, CONTENT_TYPE, TEXT));
  if (outcome instanceof GatewayError) {
    expect(outcome.status).toBe(400);
    expect(outcome.code).toBe('invalid_request');
  }
  expect(ms, `${body.length} bytes took ${ms.toFixed(0)} ms of CPU`).toBeLessThan(budgetMs(body.length));
  return outcome;
}

const part = (headers: string[], content: string) => `--${BOUNDARY}\r\n${headers.join('\r\n')}\r\n\r\n${content}\r\n`;
const close = `--${BOUNDARY}--\r\n`;
const disposition = (name: string) => `Content-Disposition: form-data; name="${name}"`;

/** One part whose header block repeats `line` `times` times (the frozen gateway). */
const repeatedHeader = (line: string, times: number) =>
  Buffer.from(part([disposition('prompt'), ...Array<string>(times).fill(line)], 'x') + close);

describe('multipart reading is bounded and linear', () => {
  it.each([1_000, 20_000, 60_000])('a part repeating one header line %i times is refused within budget, naming the limit', (times) => {
    for (const line of ['X-A: b', 'Content-Type: text/plain', `${disposition('prompt')}`]) {
      const outcome = readWithinBudget(repeatedHeader(line, times));
      expect(outcome).toBeInstanceOf(GatewayError);
      expect((outcome as GatewayError).message).toMatch(/at most \d+ (header lines|bytes)/);
      expect((outcome as GatewayError).param).toBe('prompt');
    }
  });

  it('the caps are exact: at the cap a part is read, one over it is refused', () => {
    const atLines = Buffer.from(part([disposition('prompt'), ...Array<string>(MAX_PART_HEADER_LINES - 1).fill('X-A: b')], 'x') + close);
    expect(readWithinBudget(atLines)).toMatchObject({ fields: { prompt: 'x' } });
    const overLines = Buffer.from(part([disposition('prompt'), ...Array<string>(MAX_PART_HEADER_LINES).fill('X-A: b')], 'x') + close);
    expect(readWithinBudget(overLines)).toMatchObject({ param: 'prompt', message: expect.stringContaining(`${MAX_PART_HEADER_LINES} header lines`) });

    const head = `${disposition('prompt')}\r\nX-Pad: `;
    const atBytes = Buffer.from(part([head + 'p'.repeat(MAX_PART_HEADER_BYTES - head.length)], 'x') + close);
    expect(readWithinBudget(atBytes)).toMatchObject({ fields: { prompt: 'x' } });
    const overBytes = Buffer.from(part([head + 'p'.repeat(MAX_PART_HEADER_BYTES - head.length + 1)], 'x') + close);
    expect(readWithinBudget(overBytes)).toMatchObject({ param: 'prompt', message: expect.stringContaining(`${MAX_PART_HEADER_BYTES} bytes`) });

    const parts = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => part([disposition(`f${i}`)], 'v')).join('') + close);
    expect(Object.keys((readWithinBudget(parts(MAX_PARTS)) as { fields: object }).fields)).toHaveLength(MAX_PARTS);
    expect(readWithinBudget(parts(MAX_PARTS + 1))).toMatchObject({ param: 'body', message: expect.stringContaining(`${MAX_PARTS} parts`) });
  });

  it('adversarial shapes of growing size are read or refused within budget', () => {
    for (const size of [10_000, 100_000, 1_000_000]) {
      const shapes = [
        // One header line with no end.
        `--${BOUNDARY}\r\n${disposition('prompt')}; x=${'y'.repeat(size)}`,
        // A header block that never ends, of many short lines.
        `--${BOUNDARY}\r\n${'a:b\r\n'.repeat(size / 5)}`,
        // Delimiters only.
        `--${BOUNDARY}\r\n\r\n\r\n`.repeat(size / 20),
        // Near-delimiters in a part's content.
        part([disposition('prompt')], `\r\n--${BOUNDARY.slice(0, -1)}`.repeat(size / 12)) + close,
        // A parameter flood in one Content-Disposition.
        part([`${disposition('prompt')}${'; a=b'.repeat(size / 5)}`], 'x') + close,
        // Semicolons and quotes without an end.
        part([`Content-Disposition: form-data${';"'.repeat(size / 2)}`], 'x') + close,
        // CR and LF alone, everywhere.
        `--${BOUNDARY}\r\n${'\r\r\n\n'.repeat(size / 4)}`,
      ];
      for (const shape of shapes) readWithinBudget(Buffer.from(shape));
    }
  });

  it('random bodies from multipart fragments are read or refused within budget', () => {
    const fragment = fc.oneof(
      fc.constantFrom(`--${BOUNDARY}`, `--${BOUNDARY}--`, '\r\n', '\r\n\r\n', ':', ';', '"', '\\', ' ', '\t', '=', 'name', 'filename'),
      fc.constantFrom(disposition('prompt'), disposition('model'), 'Content-Type: text/plain', 'X-A: b', 'form-data'),
      fc.string({ maxLength: 20 }),
    );
    // A fragment repeated: the way slow inputs are built.
    const run = fc.tuple(fragment, fc.integer({ min: 1, max: 5_000 })).map(([f, n]) => f.repeat(n));
    fc.assert(
      fc.property(fc.array(fc.oneof(fragment, run), { maxLength: 40 }), (pieces) => {
        readWithinBudget(Buffer.from(`--${BOUNDARY}\r\n${pieces.join('')}`));
      }),
      { numRuns: 300 },
    );
  });
});
