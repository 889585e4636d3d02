/**
 * A video submission as it came: JSON or multipart. Its fields are read for checking and
 * pricing, and the upstream receives exactly what was read: a JSON body (strictly parsed: no
 * repeated key) is relayed as it came unless its model or a plugin changes it; a multipart
 * body is always re-encoded from the parts the gateway read (multipart.ts), never relayed raw.
 */
import type { RequestContext } from '../../pipeline/types.js';
import { TIER_FIELDS } from '../../billing/tiers.js';
import { parseJsonObject } from '../../http/json.js';
import { encodeMultipart, type FilePart, readMultipart } from './multipart.js';

/** The seconds a submission gets when it names none. */
export const DEFAULT_SECONDS = 4;

/**
 * The size a job is shown with when neither the client nor the upstream named one: OpenAI's
 * default, which an OpenAI-compatible upstream renders when asked for none (its video object
 * always has a size).
 */
export const DEFAULT_SIZE = '720x1280';

/**
 * The fields that set what is rendered and billed (every field a tier is chosen by), or what
 * the job record keeps: always text. One of them sent as a file is refused, since upstreams
 * differ on whether they read it, and the price is chosen from the text fields alone.
 */
export const VIDEO_TEXT_FIELDS: ReadonlySet<string> = new Set(['model', 'prompt', 'seconds', ...TIER_FIELDS]);

export interface Submission {
  fields: Record<string, unknown>;
  /** Multipart: the files, re-encoded upstream as files. JSON: none. */
  files: FilePart[];
  body: Uint8Array | string;
  contentType: string;
}

/** Reads JSON or multipart (strictly: an ambiguous part is 400 naming its field). */
export async function readSubmission(ctx: RequestContext): Promise<Submission> {
  const bytes = await ctx.body();
  const contentType = ctx.request.headers.get('content-type') ?? 'application/json';
  if (!/^multipart\/form-data/i.test(contentType)) {
    return { fields: parseJsonObject(bytes), files: [], body: bytes, contentType: 'application/json' };
  }
  const form = readMultipart(bytes, contentType, VIDEO_TEXT_FIELDS);
  return { fields: form.fields, files: form.files, body: bytes, contentType };
}

/**
 * The submission the upstream gets: the upstream's model name, or the fields a plugin
 * replaced (`replaced`: the whole new set of fields; a multipart body keeps its files). JSON
 * stays JSON; multipart is re-encoded from the fields and files read, whatever changed.
 */
export async function forUpstream(sub: Submission, upstreamModel: string, replaced: Record<string, unknown> | null): Promise<Submission> {
  const fields = replaced ?? { ...sub.fields, model: upstreamModel };
  if (sub.contentType === 'application/json') {
    if (!replaced && sub.fields.model === upstreamModel) return sub;
    return { ...sub, fields, body: JSON.stringify(fields) };
  }
  const encoded = await encodeMultipart(fields, sub.files);
  return { ...sub, fields, body: encoded.body, contentType: encoded.contentType };
}
