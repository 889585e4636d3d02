/**
 * A strict multipart/form-data reader for submissions the gateway re-encodes upstream.
 *
 * Multipart parsers disagree on bodies a plain client never sends: a part with two
 * Content-Disposition headers is read by its last header by some (undici) and by its first
 * by others (Werkzeug). A gateway that relays such a body bills one request while the
 * upstream runs another (a 480P price for a 4K render, a catalog model for another one). So
 * the gateway reads every part itself, refuses every part whose reading is not unique (400
 * naming the field), and the upstream gets a body re-encoded from what was read, never the
 * client's bytes.
 */
import { GatewayError } from '../../errors.js';

/** A file part, re-encoded upstream as a file with its filename and content type. */
export interface FilePart {
  name: string;
  filename: string;
  contentType: string;
  data: Uint8Array<ArrayBuffer>;
}

export interface ReadForm {
  /** The text fields, in the order they came. */
  fields: Record<string, string>;
  files: FilePart[];
}

/** At most this many parts: a submission has a handful of fields and a reference image or two. */
export const MAX_PARTS = 64;
/**
 * At most this many header lines per part, and this many bytes in all of them: a plain part
 * has one or two short lines. The body limit alone does not bound the work, since a part can
 * repeat one line tens of thousands of times under it; each cap is checked before the lines
 * are read, so the work per body stays linear in its size.
 */
export const MAX_PART_HEADER_LINES = 16;
export const MAX_PART_HEADER_BYTES = 8192;
const CRLF = Buffer.from('\r\n');
const HEADER_END = Buffer.from('\r\n\r\n');
const utf8 = new TextDecoder('utf-8', { fatal: true });

const bad = (message: string, param?: string) =>
  new GatewayError('invalid_request', message, param === undefined ? {} : { param: param.slice(0, 100) });

/** The boundary of a multipart Content-Type (given exactly once), or 400. */
function boundaryOf(contentType: string): string {
  const found = [...contentType.matchAll(/;\s*boundary\s*=\s*(?:"([^"]{1,70})"|([^\s;"]{1,70}))/gi)];
  if (found.length !== 1) throw bad('The multipart Content-Type must name exactly one boundary.');
  return (found[0]![1] ?? found[0]![2])!;
}

/**
 * A header's value split into its first token and its `key=value` parameters. A parameter
 * given twice, or a quoted value with a backslash escape (read differently by different
 * parsers), makes the header ambiguous: null.
 */
function parameters(value: string): { type: string; params: Map<string, string> } | null {
  const params = new Map<string, string>();
  const semi = value.indexOf(';');
  const type = (semi < 0 ? value : value.slice(0, semi)).trim().toLowerCase();
  const re = /;\s*([^\s=;]+)\s*=\s*(?:"([^"]*)"|([^\s;"]*))\s*/y;
  let pos = semi < 0 ? value.length : semi;
  while (pos < value.length) {
    re.lastIndex = pos;
    const m = re.exec(value);
    if (!m) return null;
    const key = m[1]!.toLowerCase();
    const v = m[2] ?? m[3] ?? '';
    if (params.has(key) || (m[2] !== undefined && v.includes('\\'))) return null;
    params.set(key, v);
    pos = re.lastIndex;
  }
  return { type, params };
}

/** A part's headers by lowercase name (each with every value it was given), or 400 when they cannot be read. */
function headersOf(block: string): Map<string, string[]> {
  const headers = new Map<string, string[]>();
  if (block === '') return headers;
  const lines = block.split('\r\n');
  if (lines.length > MAX_PART_HEADER_LINES) {
    const name = nameIn(lines.find((line) => /^content-disposition:/i.test(line)));
    throw bad(`A multipart part may have at most ${MAX_PART_HEADER_LINES} header lines; this one has ${lines.length}.`, name || 'body');
  }
  for (const line of lines) {
    const colon = line.indexOf(':');
    // A folded line (leading white space) or a line that is no header is read differently by
    // different parsers: refused.
    if (colon <= 0 || /^[ \t]/.test(line)) throw bad('A multipart part has a header that cannot be read.');
    const name = line.slice(0, colon).trim().toLowerCase();
    const values = headers.get(name);
    if (values) values.push(line.slice(colon + 1).trim());
    else headers.set(name, [line.slice(colon + 1).trim()]);
  }
  return headers;
}

/** The name a Content-Disposition header gives, if any (for naming the field in an error). */
function nameIn(value: string | undefined): string | undefined {
  return value === undefined ? undefined : /;\s*name\s*=\s*"?([^";]*)/i.exec(value)?.[1];
}

/** Reads one part into `form`; `textFields` are the fields that are never files. */
function readPart(headerBlock: string, data: Uint8Array<ArrayBuffer>, form: ReadForm, seen: Set<string>, textFields: ReadonlySet<string>): void {
  const headers = headersOf(headerBlock);
  const dispositions = headers.get('content-disposition') ?? [];
  if (dispositions.length > 1) {
    const name = nameIn(dispositions[0]) ?? '';
    throw bad(`The multipart field '${name.slice(0, 100)}' has ${dispositions.length} Content-Disposition headers.`, name);
  }
  const disposition = dispositions[0] === undefined ? null : parameters(dispositions[0]);
  const name = disposition?.params.get('name');
  if (disposition?.type !== 'form-data') {
    throw bad('A multipart part has no readable Content-Disposition: form-data header.', nameIn(dispositions[0]));
  }
  if (!name) throw bad('A multipart part has no name.');
  // A field sent twice means whatever the upstream reads (the first? the last?) may differ
  // from what is billed: refused, as a duplicate JSON key is.
  if (seen.has(name)) throw bad(`The multipart field '${name.slice(0, 100)}' is given more than once.`, name);
  seen.add(name);
  const types = headers.get('content-type') ?? [];
  if (types.length > 1) throw bad(`The multipart field '${name.slice(0, 100)}' has ${types.length} Content-Type headers.`, name);
  const filename = disposition.params.get('filename') ?? disposition.params.get('filename*');
  if (filename === undefined) {
    try {
      form.fields[name] = utf8.decode(data);
    } catch {
      throw bad(`The multipart field '${name.slice(0, 100)}' is not valid UTF-8 text.`, name);
    }
    return;
  }
  // Some upstreams read a text field sent as a file as text, others as a file: ambiguous.
  if (textFields.has(name)) throw bad(`The multipart field '${name.slice(0, 100)}' is a text field but was sent as a file.`, name);
  form.files.push({ name, filename, contentType: types[0] || 'application/octet-stream', data });
}

/**
 * Where the header block that starts at `start` ends (its blank line), looking no further than
 * MAX_PART_HEADER_BYTES past it: 400 when the block is longer, or has no end.
 */
function headerEndOf(body: Buffer, start: number): number {
  const window = body.subarray(start, start + MAX_PART_HEADER_BYTES + HEADER_END.length);
  const end = window.indexOf(HEADER_END);
  if (end >= 0) return start + end;
  if (window.length < MAX_PART_HEADER_BYTES + HEADER_END.length) throw bad('The multipart body could not be parsed.');
  const name = nameIn(/content-disposition:[^\r]*/i.exec(window.toString('latin1'))?.[0]);
  throw bad(`The header lines of a multipart part may have at most ${MAX_PART_HEADER_BYTES} bytes in all.`, name || 'body');
}

/**
 * Reads a multipart/form-data body strictly (see the file's comment): the text fields and
 * the files, or 400 with `param` naming the field whose part is ambiguous.
 */
export function readMultipart(bytes: Uint8Array, contentType: string, textFields: ReadonlySet<string>): ReadForm {
  const delimiter = Buffer.from(`\r\n--${boundaryOf(contentType)}`);
  // The first delimiter may open the body without a CRLF before it.
  const body = Buffer.concat([CRLF, bytes]);
  const form: ReadForm = { fields: {}, files: [] };
  const seen = new Set<string>();
  let at = body.indexOf(delimiter);
  for (let parts = 0; ; parts++) {
    if (at < 0) throw bad('The multipart body could not be parsed.');
    let p = at + delimiter.length;
    if (body[p] === 0x2d && body[p + 1] === 0x2d) return form; // the closing delimiter
    if (parts >= MAX_PARTS) throw bad(`A multipart body may have at most ${MAX_PARTS} parts.`, 'body');
    while (body[p] === 0x20 || body[p] === 0x09) p++;
    if (body[p] !== 0x0d || body[p + 1] !== 0x0a) throw bad('The multipart body could not be parsed.');
    p += 2;
    // A part with no headers at all has its blank line right away.
    const headerEnd = body[p] === 0x0d && body[p + 1] === 0x0a ? p - 2 : headerEndOf(body, p);
    const next = body.indexOf(delimiter, headerEnd + 4);
    if (next < 0) throw bad('The multipart body could not be parsed.');
    const headerBlock = headerEnd < p ? '' : body.subarray(p, headerEnd).toString('utf8');
    readPart(headerBlock, new Uint8Array(body.subarray(headerEnd + 4, next)), form, seen, textFields);
    at = next;
  }
}

/** The multipart body (and its Content-Type) the upstream gets: `fields` as text, then `files`. */
export async function encodeMultipart(
  fields: Record<string, unknown>,
  files: FilePart[],
): Promise<{ body: Uint8Array; contentType: string }> {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) form.append(k, typeof v === 'string' ? v : JSON.stringify(v));
  for (const f of files) form.append(f.name, new Blob([f.data], { type: f.contentType }), f.filename);
  const encoded = new globalThis.Response(form);
  // The Content-Type (the boundary) is read before the body: Bun fills it in lazily and has
  // none once the body was read, and a multipart body without its boundary is unreadable.
  const contentType = encoded.headers.get('content-type');
  if (!contentType?.includes('boundary=')) throw new Error('The runtime encoded a multipart body without its boundary.');
  return { body: new Uint8Array(await encoded.arrayBuffer()), contentType };
}
