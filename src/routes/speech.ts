/**
 * POST /audio/speech: audio bytes streamed through with the content type of the requested
 * format; billed per token of `input`, counted with the real tokenizer (known before the call,
 * so the hold is the exact price).
 */
import { z } from 'zod';
import { CALL_HOLD_TTL_MS } from '../billing/meter.js';
import { chooseTier } from '../billing/tiers.js';
import type { Core, RequestContext } from '../core.js';
import { GatewayError } from '../errors.js';
import { parseJsonObject } from '../http.js';
import { cost } from '../money.js';
import { callUpstream, upstreamError, upstreamHeaders } from '../upstream/relay.js';
import { holdMedia, refuseAgentKeys } from './media.js';
import { zodError } from './validation.js';
import { Response } from '@whatwg-node/server';

export const AUDIO_TYPES = {
  mp3: 'audio/mpeg',
  opus: 'audio/opus',
  aac: 'audio/aac',
  flac: 'audio/flac',
  wav: 'audio/wav',
  pcm: 'audio/pcm',
} as const;

const speechSchema = z.looseObject({
  model: z.string().min(1),
  input: z.string().min(1).max(4096),
  voice: z.union([z.string().min(1), z.looseObject({ id: z.string() })]),
  response_format: z.enum(['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm']).optional(),
  speed: z.number().min(0.25).max(4).optional(),
  instructions: z.string().max(4096).optional(),
  stream_format: z.enum(['audio']).optional(),
});

export async function createSpeech(core: Core, ctx: RequestContext): Promise<Response> {
  refuseAgentKeys(ctx);
  const bytes = await ctx.body();
  const body = parseJsonObject(bytes);
  const checked = speechSchema.safeParse(body);
  if (!checked.success) throw zodError(checked.error, body);
  const req = checked.data;
  const model = await core.catalog.resolve(req.model, ctx.key, 'audio', () => core.grants(ctx.key.accountId));
  const { pricePico } = chooseTier(model, {});
  const tokens = core.tokenizer.count(req.input);
  const amount = cost(pricePico, tokens);
  const holdId = ctx.requestId;
  await holdMedia(core, ctx, { id: holdId, amount, ttlMs: CALL_HOLD_TTL_MS }, `${tokens} input tokens of speech`);

  const format = req.response_format ?? 'mp3';
  const abort = new AbortController();
  const onClientGone = () => abort.abort(new Error('client disconnected'));
  ctx.request.signal?.addEventListener('abort', onClientGone, { once: true });
  let done = false;
  const finish = (produced: boolean) => {
    if (done) return;
    done = true;
    ctx.request.signal?.removeEventListener('abort', onClientGone);
    if (!produced) {
      void core.meter.release(ctx.key.accountId, holdId);
      return;
    }
    void core.meter.settle({
      holdId,
      accountId: ctx.key.accountId,
      cost: amount,
      entry: {
        id: ctx.requestId,
        accountId: ctx.key.accountId,
        keyId: ctx.key.id,
        model: model.id,
        units: { kind: 'speech_tokens', tokens },
        at: core.now(),
      },
    });
  };

  const upstreamBody = model.upstreamModel === model.id ? bytes : JSON.stringify({ ...body, model: model.upstreamModel });
  let res;
  try {
    res = await callUpstream(core, model.upstream, {
      method: 'POST',
      path: '/audio/speech',
      headers: upstreamHeaders(ctx.requestId),
      body: upstreamBody,
      signal: abort.signal,
    });
    if (res.status < 200 || res.status >= 300) throw await upstreamError(res, model.upstream);
  } catch (err) {
    finish(false);
    throw err;
  }

  // The audio streams through as it arrives; once a byte has gone out the speech was produced.
  const upstream = res;
  const iterator = upstream.body[Symbol.asyncIterator]();
  let sentAny = false;
  const stream = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const next = await iterator.next();
          if (next.done) {
            finish(sentAny);
            controller.close();
            return;
          }
          sentAny = true;
          controller.enqueue(next.value);
        } catch (err) {
          finish(sentAny);
          controller.error(err instanceof GatewayError ? err : new GatewayError('upstream_error', 'The speech stream failed.'));
        }
      },
      cancel() {
        abort.abort();
        upstream.discard();
        finish(sentAny);
      },
    },
    { highWaterMark: 0 },
  );
  return new Response(stream, {
    status: 200,
    headers: { ...ctx.headers, 'content-type': AUDIO_TYPES[format] },
  });
}
