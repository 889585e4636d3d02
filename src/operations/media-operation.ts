/**
 * A media endpoint, declared: its schema, its price plan (what is held, and in which units)
 * and its relay; `mediaOperation` does the rest for all of them, in one order: the request is
 * read and checked, the model resolved, the input guardrails applied, the price computed on
 * what the guardrails left, a job slot taken when the answer may outlive the request, and the
 * hold opened. Only then does the declared relay call the upstream; it owns the billed call
 * from there (the settle rule in `billing/settle.ts` bills or releases it).
 */
import type { z } from 'zod';
import type { BilledCall } from '../billing/meter.js';
import { openAmountCall } from '../billing/billed-call.js';
import type { Modality, Model } from '../catalog/catalog.js';
import { guardedBody } from '../guardrails/index.js';
import { GatewayError } from '../errors.js';
import { pluginFields } from '../upstream/plugin-body.js';
import { parseJsonObject } from '../http/json.js';
import { newJobId, type LeaseRef } from '../jobs/runner.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import { refuseNul, takeSlot } from './media.js';
import { refuseAgentKeys, refuseContextFields, zodError } from './shared.js';
import type { Operation } from './types.js';
import { readSubmission, type Submission } from './videos/submission.js';

/** What a media request is held at: the amount, and words for a 402. */
export interface MediaPrice {
  amount: bigint;
  /** What the hold buys, as a 402 says it ("3 image(s) at tier hd"). */
  what: string;
  /** The count the price is for (tokens of speech, images, seconds of video). */
  count: number;
}

/** A price per image or per second: the tier chosen and its unit price, kept for the settle. */
export interface TierPrice extends MediaPrice {
  tier: string;
  unitPricePico: bigint;
}

/** A checked, priced and held media request, handed to its relay. */
export interface MediaCall<R, P extends MediaPrice = MediaPrice> {
  model: Model;
  /** The client's fields as checked, with the guardrails' redactions. */
  req: R;
  /** What goes upstream: the fields after the guardrails, and the body they are sent as. */
  sub: Submission;
  price: P;
  call: BilledCall;
  /** The job the answer may land in, with its in-flight slot (relays `inline-or-job` and `job`). */
  job: { id: string; lease: LeaseRef } | null;
  /**
   * Whether onUpstreamRequest plugins ran before the hold: `sub` is then what they (and the
   * guardrails after them) left for the model's own target, and `req` and `price` are of it. A
   * relay sends it to the own target without running them again; a fallback target's body goes
   * through them at send time.
   */
  pluginsRan: boolean;
}

/** The job of a relay that always has one (`inline-or-job`, `job`). */
export function jobOf(m: MediaCall<unknown, MediaPrice>): { id: string; lease: LeaseRef } {
  if (!m.job) throw new Error('a media relay with a job ran without one');
  return m.job;
}

export interface MediaOperation<R, P extends MediaPrice = MediaPrice> {
  /** The path after /v1, which is also the upstream's path. */
  path: string;
  modality: Exclude<Modality, 'text'>;
  schema: z.ZodType<R>;
  /** The body may be multipart/form-data (its files are re-encoded upstream). */
  multipart?: boolean;
  /** The price plan: what the call is held at, from the checked request and the resolved model. */
  price(core: Services, model: Model, req: R): P;
  /**
   * How the answer comes back: `bytes` streams the upstream's bytes through (speech);
   * `inline-or-job` answers within a deadline, else 202 with a job (images); `job` is always a
   * job whose hold outlives the request and any instance can finish (videos).
   */
  relay: 'bytes' | 'inline-or-job' | 'job';
  run(core: Services, ctx: RequestContext, m: MediaCall<R, P>): Promise<Response>;
}

export function mediaOperation<R, P extends MediaPrice>(decl: MediaOperation<R, P>): Operation {
  const jobKind = decl.modality === 'image' ? 'image' : 'video';
  return {
    method: 'POST',
    path: decl.path,
    idempotent: true,
    async run(core, ctx) {
      refuseAgentKeys(ctx);
      const read = await readBody(ctx, decl.multipart === true);
      let checked = decl.schema.safeParse(read.fields);
      if (!checked.success) throw zodError(checked.error, read.fields);
      refuseContextFields(read.fields, decl.path);
      // A job's record keeps its text fields: one no store can keep is refused on every driver alike.
      if (decl.relay !== 'bytes') refuseNul(read.fields);
      const model = await core.catalog.resolve(read.fields.model, ctx.key, decl.modality, () => core.grants(ctx.key.accountId));
      // The plugins see the body first, as for text, once: what they leave is what the
      // guardrails check and what is priced, held and sent (a plugin asking for 4K or n: 4 is
      // held at that).
      const pluginsRan = core.hooks.has('onUpstreamRequest');
      const plugged = pluginsRan ? await pluginFields(core, ctx, model, decl.path, { ...read.fields, model: model.upstreamModel }) : null;
      let body = read;
      if (plugged) {
        // The client's model id stays: the relays name each target's own model.
        const fields = { ...plugged, model: read.fields.model };
        checked = decl.schema.safeParse(fields);
        if (!checked.success) {
          const issue = checked.error.issues[0];
          throw new GatewayError('internal_error', `A plugin's onUpstreamRequest made a ${decl.path} request that is not one (${issue?.path.join('.') || 'body'}: ${issue?.message ?? 'invalid'}).`);
        }
        body = { ...read, fields, ...(read.contentType === 'application/json' ? { body: JSON.stringify(fields) } : {}) };
      }
      // Then the input guardrails, before the hold: a block refuses here, and what they
      // redacted is what is priced and sent (multipart is re-encoded from its fields anyway).
      const sub = await guarded(core, ctx, model, decl.path, body);
      const req = sub === read ? checked.data : ({ ...checked.data, ...sub.fields } as R);
      const price = decl.price(core, model, req);

      const jobId = decl.relay === 'bytes' ? null : newJobId(jobKind);
      const lease = jobId ? await takeSlot(core, ctx, jobKind, jobId) : null;
      let call: BilledCall;
      try {
        // A job any instance can finish holds under its own id, for the hold TTL until its record
        // exists (an instance that dies before writing it leaves no job to release the hold: it
        // lapses), then for as long as the job lives (the job's run keeps it for that).
        const durable = decl.relay === 'job' && jobId ? { id: jobId, durable: true } : { id: ctx.requestId };
        call = await openAmountCall(core, ctx, { ...durable, model, amount: price.amount }, price.what);
      } catch (err) {
        if (lease) await core.jobs.drop(lease);
        throw err;
      }
      const res = await decl.run(core, ctx, { model, req, sub, price, call, job: jobId && lease ? { id: jobId, lease } : null, pluginsRan });
      // A call to a Deprecated model says so, and when it retires, on every endpoint.
      if (model.deprecationHeaders) for (const [name, value] of Object.entries(model.deprecationHeaders)) res.headers.set(name, value);
      return res;
    },
  };
}

async function readBody(ctx: RequestContext, multipart: boolean): Promise<Submission> {
  if (multipart) return readSubmission(ctx);
  const bytes = await ctx.body();
  return { fields: parseJsonObject(bytes), files: [], body: bytes, contentType: 'application/json' };
}

async function guarded(core: Services, ctx: RequestContext, model: Model, path: string, read: Submission): Promise<Submission> {
  if (read.contentType !== 'application/json') {
    if (!core.guardrails.any) return read;
    const checked = await core.guardrails.input(ctx, model, path, read.fields);
    return checked.fields === read.fields ? read : { ...read, fields: checked.fields };
  }
  const bytes = typeof read.body === 'string' ? Buffer.from(read.body) : read.body;
  const out = await guardedBody(core.guardrails, ctx, model, path, read.fields, bytes);
  return out.fields === read.fields ? read : { ...read, fields: out.fields, body: out.bytes };
}
