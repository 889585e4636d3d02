/**
 * POST /audio/speech: audio bytes streamed through with the content type of the requested
 * format; billed per token of `input` and `instructions` (both steer the rendering, and a
 * provider bills both), counted with the real tokenizer before the call, so the hold is the
 * exact price.
 */
import { z } from 'zod';
import { listCost } from '../billing/pricing.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import { errors, GatewayError } from '../errors.js';
import { upstreamFailure, type UpstreamResponse } from '../upstream/client.js';
import { upstreamError } from '../upstream/answer-errors.js';
import { beginBody, type BodyBegun, relayBytes } from '../upstream/stream/bytes.js';
import { settleSpeech } from '../billing/settle.js';
import { callModelWithBody } from './media.js';
import { type MediaCall, mediaOperation } from './media-operation.js';
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

export const createSpeech = mediaOperation({
  path: '/audio/speech',
  modality: 'audio',
  schema: speechSchema,
  // The exact price: every token of the text spoken and of the instructions steering it.
  price(core, model, req) {
    const tokens = core.tokenizer.count(req.input) + (req.instructions ? core.tokenizer.count(req.instructions) : 0);
    return { amount: listCost(model, { kind: 'speech_tokens', tokens }), what: `${tokens} input tokens of speech`, count: tokens };
  },
  relay: 'bytes',
  run: relaySpeech,
});

async function relaySpeech(core: Services, ctx: RequestContext, m: MediaCall<z.infer<typeof speechSchema>>): Promise<Response> {
  const { model, req, call } = m;
  const tokens = m.price.count;
  const format = req.response_format ?? 'mp3';
  const abort = new AbortController();
  // Once the upstream answered 200 the speech is billed, even if the client leaves before its
  // first audio (the provider bills its input as a prompt); an upstream that fails before any
  // audio, or shutdown cutting it, bills nothing.
  let clientLeft = false;
  const onClientGone = () => {
    clientLeft = true;
    abort.abort(new Error('client disconnected'));
  };
  ctx.request.signal?.addEventListener('abort', onClientGone, { once: true });
  const finish = (produced: boolean): Promise<void> => {
    ctx.request.signal?.removeEventListener('abort', onClientGone);
    return settleSpeech(call, tokens, produced, { upstream: servedBy });
  };

  let res: UpstreamResponse | undefined;
  /** The upstream that serves the call (the model's first target until one answered). */
  let servedBy = model.upstream;
  let sentAny = false;
  let shutDown = false;
  let cut: ((err: Error) => void) | null = null;
  // Shutdown's grace period is over: stop the audio; what already went out is billed.
  call.onAbort(() => {
    shutDown = true;
    abort.abort();
    res?.discard();
    void finish(sentAny);
    cut?.(errors.cutByShutdown('audio'));
  });

  // The first audio is read before the answer's head goes out, inside the call's attempt: an
  // upstream that fails, or ends, before any is tried again on the model's next target (and
  // counts against its circuit), and then a 502 the client can read, not a connection dropped
  // after a 200.
  let begun: BodyBegun | null = null;
  const firstAudio = async (r: UpstreamResponse) => {
    begun = await beginBody(r);
    if (!begun) throw new GatewayError('upstream_error', 'The upstream sent no audio.');
  };
  try {
    const answer = await callModelWithBody(core, ctx, model, '/audio/speech', m.sub.fields, m.sub.body, abort.signal, m.pluginsRan, firstAudio);
    res = answer.res;
    servedBy = answer.served.upstream;
    if (res.status < 200 || res.status >= 300) throw await upstreamError(res, servedBy, { log: core.log, requestId: ctx.requestId });
  } catch (err) {
    void finish(false);
    throw err;
  }
  const first = begun as BodyBegun | null;
  // No audio, because the client left (or shutdown cut the call) after the upstream's 200; or
  // the client left meanwhile, and the transport read on: nobody will read the answer.
  if (!first || clientLeft) {
    res.discard();
    await finish(clientLeft);
    if (shutDown) throw errors.cutByShutdown('audio');
    throw clientLeft
      ? new GatewayError('client_closed', 'The client closed the connection before the audio.')
      : upstreamFailure(new Error('the speech stream failed before its first audio'), servedBy);
  }

  // The audio streams through as it arrives; once a byte has gone out the speech was produced,
  // and the end of the audio goes out once its charge is in the store.
  const stream = relayBytes(res, {
    sent: () => void (sentAny = true),
    end: () => finish(true),
    // Past the first audio, which went out with the first pull: billed.
    failed: () => void finish(true),
    failure: (err) => (err instanceof GatewayError ? err : new GatewayError('upstream_error', 'The speech stream failed.')),
    // The client left after the upstream's 200: billed.
    cancelled: () => {
      abort.abort();
      void finish(true);
    },
    onCut: (c) => void (cut = c),
  }, first);
  return new Response(stream, {
    status: 200,
    headers: { 'content-type': AUDIO_TYPES[format] },
  });
}
