/**
 * A video submission as it came: JSON or multipart. Its fields are read for checking and
 * pricing, and its bytes are kept so the upstream receives it in the encoding it came in.
 */
import type { RequestContext } from '../../pipeline/types.js';
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

/**
 * The submission to relay, in the encoding it came in: the upstream's model name, or the
 * fields a plugin replaced (`replaced`: the whole new set of fields; a multipart body keeps
 * its files).
 */
export async function forUpstream(sub: Submission, upstreamModel: string, replaced: Record<string, unknown> | null): Promise<Submission> {
  if (!replaced && sub.fields.model === upstreamModel) return sub;
  if (sub.contentType === 'application/json') {
    const fields = replaced ?? { ...parseJsonObject(sub.body as Uint8Array), model: upstreamModel };
    return { ...sub, body: JSON.stringify(fields) };
  }
  const form = await new globalThis.Response(sub.body as BodyInit, { headers: { 'content-type': sub.contentType } }).formData();
  form.set('model', upstreamModel);
  if (replaced) {
    for (const k of Object.keys(sub.fields)) if (!(k in replaced)) form.delete(k);
    for (const [k, v] of Object.entries(replaced)) form.set(k, typeof v === 'string' ? v : JSON.stringify(v));
  }
  const encoded = new globalThis.Response(form);
  return {
    ...sub,
    body: new Uint8Array(await encoded.arrayBuffer()),
    contentType: encoded.headers.get('content-type') ?? sub.contentType,
  };
}
