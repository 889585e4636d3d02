/**
 * A video submission as it came: JSON or multipart. Its fields are read for checking and
 * pricing, and its bytes are kept so the upstream receives it in the encoding it came in.
 */
import type { RequestContext } from '../../core.js';
import { GatewayError } from '../../errors.js';
import { parseJsonObject } from '../../http/json.js';

/** The seconds a submission gets when it names none. */
export const DEFAULT_SECONDS = 4;

export interface Submission {
  fields: Record<string, unknown>;
  body: Uint8Array | string;
  contentType: string;
}

/** Reads JSON or multipart; keeps the bytes so they can be relayed in the encoding they came in. */
export async function readSubmission(ctx: RequestContext): Promise<Submission> {
  const bytes = await ctx.body();
  const contentType = ctx.request.headers.get('content-type') ?? 'application/json';
  if (!/^multipart\/form-data/i.test(contentType)) {
    return { fields: parseJsonObject(bytes), body: bytes, contentType: 'application/json' };
  }
  let form: FormData;
  try {
    form = await new globalThis.Response(bytes as BodyInit, { headers: { 'content-type': contentType } }).formData();
  } catch {
    throw new GatewayError('invalid_request', 'The multipart body could not be parsed.');
  }
  const fields: Record<string, unknown> = {};
  const seen = new Set<string>();
  for (const [k, v] of form.entries()) {
    // A field sent twice means whatever the upstream reads (the first? the last?) may differ
    // from what is billed: refused, as a duplicate JSON key is.
    if (seen.has(k)) {
      throw new GatewayError('invalid_request', `The multipart field '${k.slice(0, 100)}' is given more than once.`, {
        param: k.slice(0, 100),
      });
    }
    seen.add(k);
    if (typeof v === 'string') fields[k] = v;
  }
  return { fields, body: bytes, contentType };
}

/** The submission with `model` replaced by the upstream's name for it, in the same encoding. */
export async function withModel(sub: Submission, upstreamModel: string): Promise<Submission> {
  if (sub.fields.model === upstreamModel) return sub;
  if (sub.contentType === 'application/json') {
    return { ...sub, body: JSON.stringify({ ...(parseJsonObject(sub.body as Uint8Array)), model: upstreamModel }) };
  }
  const form = await new globalThis.Response(sub.body as BodyInit, { headers: { 'content-type': sub.contentType } }).formData();
  form.set('model', upstreamModel);
  const encoded = new globalThis.Response(form);
  return {
    ...sub,
    body: new Uint8Array(await encoded.arrayBuffer()),
    contentType: encoded.headers.get('content-type') ?? sub.contentType,
  };
}
