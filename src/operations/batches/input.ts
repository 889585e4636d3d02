/**
 * A batch's input file, read line by line (OpenAI's format: one JSON object per line with
 * `custom_id`, `method: "POST"`, `url` and `body`), and the context each line runs in: the
 * batch's key, its own request id, its body, and no client (only a shutdown cuts it, no rate check).
 */
import { GatewayError } from '../../errors.js';
import { caseVariantKey, jsonTextFault } from '../../http/json.js';
import { newRecord } from '../../observability/record.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { ApiKeyRecord } from '../../stores/types.js';

/** More lines than this in one batch are refused, as OpenAI does. */
export const MAX_BATCH_LINES = 50_000;

export interface BatchInputLine {
  /** 1-based, counted over the file's lines (blank ones included). */
  line: number;
  customId: string;
  body: Record<string, unknown>;
}

/** A 400 naming the line (or the 403 of an agent key naming another model). */
export function lineError(line: number, message: string, status = 400, code = 'invalid_request'): GatewayError {
  return new GatewayError(code, `Line ${line}: ${message}`, { param: 'input_file_id', ...(status === 400 ? {} : { status }) });
}

/** The 1-based line of a file's first byte that is not UTF-8 (a newline byte never is part of a longer character). */
function firstNonUtf8Line(bytes: Uint8Array): number {
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let line = 1;
  for (let start = 0; start <= bytes.length; line++) {
    const nl = bytes.indexOf(10, start);
    const end = nl === -1 ? bytes.length : nl;
    try {
      decoder.decode(bytes.subarray(start, end));
    } catch {
      return line;
    }
    if (nl === -1) break;
    start = nl + 1;
  }
  return line;
}

/** How long a batch's work over its lines (reading, planning) runs before it lets other calls in. */
const SLICE_MS = 10;

/**
 * A pause point for a long loop over a batch's lines: resolves at once while the loop's slice
 * lasts, else on the next turn of the event loop. An input file of 50,000 lines takes seconds
 * to read and plan; in one go it would stall every other call (streams included) that long.
 */
export function slicer(): () => Promise<void> | undefined {
  let until = performance.now() + SLICE_MS;
  return () => {
    if (performance.now() < until) return undefined;
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        until = performance.now() + SLICE_MS;
        resolve();
      }),
    );
  };
}

/** Reads every line, or throws the 400 of the first bad one (`creating`: also the rules new batches are held to). */
export async function readBatchInput(bytes: Uint8Array, endpoint: string, creating = false): Promise<BatchInputLine[]> {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw lineError(firstNonUtf8Line(bytes), 'not UTF-8 text.');
  }
  const raw = text.split('\n');
  let nonBlank = 0;
  for (let i = 0; i < raw.length; i++) {
    if (raw[i]!.trim() === '') continue;
    // The first line past the limit is the one named.
    if (++nonBlank > MAX_BATCH_LINES) throw lineError(i + 1, `a batch takes at most ${MAX_BATCH_LINES} lines.`);
  }
  if (nonBlank === 0) throw new GatewayError('invalid_request', 'The input file has no lines.', { param: 'input_file_id' });
  const seen = new Set<string>();
  const out: BatchInputLine[] = [];
  const pause = slicer();
  for (let i = 0; i < raw.length; i++) {
    const l = raw[i]!;
    const line = i + 1;
    if (l.trim() === '') continue;
    const paused = pause();
    if (paused) await paused;
    let parsed: unknown;
    try {
      parsed = JSON.parse(l);
    } catch {
      throw lineError(line, 'not a JSON object.');
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw lineError(line, 'not a JSON object.');
    // As a body sent directly: JSON.parse keeps the last of two keys, an upstream may keep the
    // first. Refused at creation only: a batch accepted before this rule still runs as it was.
    const fault = creating ? jsonTextFault(l) : null;
    if (fault) throw lineError(line, `the line ${fault}`);
    const { custom_id: customId, method, url, body } = parsed as Record<string, unknown>;
    if (typeof customId !== 'string' || customId === '' || customId.length > 512 || customId.includes('\u0000')) throw lineError(line, 'custom_id must be a non-empty string of at most 512 characters.');
    if (seen.has(customId)) throw lineError(line, `the custom_id '${customId.slice(0, 100)}' is used by an earlier line; each line needs its own.`);
    seen.add(customId);
    if (method !== 'POST') throw lineError(line, "method must be 'POST'.");
    if (url !== endpoint) throw lineError(line, `url must be the batch's endpoint '${endpoint}'.`);
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw lineError(line, 'body must be a JSON object.');
    if ((body as Record<string, unknown>).stream === true) throw lineError(line, 'a line of a batch cannot stream.');
    // As a body sent directly: a field spelled in other letters is one an upstream may read.
    const variant = creating ? caseVariantKey(body as Record<string, unknown>) : null;
    if (variant !== null) throw lineError(line, `the body names ${JSON.stringify(variant.slice(0, 100))}, which an upstream may read as another field.`);
    out.push({ line, customId, body: body as Record<string, unknown> });
  }
  return out;
}

/**
 * The context a line runs in (and is planned in, when the batch is created); `cut` aborts it as
 * a client that left would (the upstream call stops).
 */
export function lineContext(key: ApiKeyRecord, endpoint: string, requestId: string, body: Record<string, unknown>, cut?: AbortSignal): RequestContext {
  const bytes = new TextEncoder().encode(JSON.stringify(body));
  const request = new Request(`http://batch.invalid${endpoint}`, { method: 'POST', headers: { 'content-type': 'application/json' }, ...(cut ? { signal: cut } : {}) });
  return {
    request,
    requestId,
    clientIp: '',
    params: {},
    query: new URLSearchParams(),
    key,
    observed: { record: newRecord(requestId, 'POST', endpoint, null), hold() {}, release() {} },
    headers: {},
    body: () => Promise.resolve(bytes),
    releaseBody() {},
    takeKeyCheck: () => null,
    runKeyCheck: () => Promise.resolve(),
  };
}
