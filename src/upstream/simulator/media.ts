/**
 * Media routes of the built-in simulator: images after a configurable delay (so the demo can
 * show a 202), short valid audio files, and video jobs that progress over a few seconds.
 * A prompt containing "[fail]" makes the simulated generation fail, for trying refunds.
 */
import { randomUUID } from 'node:crypto';
import type { Tokenizer } from '../../billing/tokens.js';
import type { UpstreamCall, UpstreamResponse } from '../client.js';
import { bytesResponse, jsonResponse } from '../local-response.js';
import { sleep } from '../sleep.js';

export interface MediaSimulatorOptions {
  imageDelayMs: number;
  videoDurationMs: number;
}

export interface MediaSimulator {
  handle(call: UpstreamCall): Promise<UpstreamResponse | null>;
  close(): void;
}

/** A 1x1 transparent PNG. */
const PNG_1X1 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

/** `ms` of 16-bit mono silence at 8 kHz, as WAV (header + samples) or raw PCM. */
function silence(ms: number, wav: boolean): Uint8Array {
  const samples = Math.round((8000 * ms) / 1000);
  const data = Buffer.alloc(samples * 2);
  if (!wav) return data;
  const h = Buffer.alloc(44);
  h.write('RIFF', 0);
  h.writeUInt32LE(36 + data.length, 4);
  h.write('WAVE', 8);
  h.write('fmt ', 12);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(1, 22); // mono
  h.writeUInt32LE(8000, 24);
  h.writeUInt32LE(16000, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36);
  h.writeUInt32LE(data.length, 40);
  return Buffer.concat([h, data]);
}

/** Silent MPEG-1 Layer III frames (128 kbit/s, 44.1 kHz): a valid, playable mp3. */
function silentMp3(frames: number): Uint8Array {
  const frame = Buffer.alloc(417);
  frame.set([0xff, 0xfb, 0x90, 0x64]);
  return Buffer.concat(Array.from({ length: frames }, () => frame));
}

/** A minimal ISO-BMFF file (ftyp + free boxes): placeholder bytes typed video/mp4. */
function placeholderMp4(): Uint8Array {
  const ftyp = Buffer.from([0, 0, 0, 24, ...Buffer.from('ftypisom'), 0, 0, 2, 0, ...Buffer.from('isomiso2')]);
  const free = Buffer.from([0, 0, 0, 16, ...Buffer.from('free'), ...Buffer.from('simulated!')].slice(0, 16));
  return Buffer.concat([ftyp, free]);
}

/** The clip a `resolution` (without `size`) asks for, portrait like the default 720x1280. */
const SIZE_OF_RESOLUTION: Record<string, string> = {
  '480P': '480x854',
  '720P': '720x1280',
  '1080P': '1080x1920',
  '4K': '2160x3840',
};

interface SimVideo {
  id: string;
  model: string;
  prompt: string;
  seconds: string;
  size: string;
  createdAt: number;
  fail: boolean;
}

function parseBody(c: UpstreamCall): Record<string, unknown> | null {
  try {
    const text = typeof c.body === 'string' ? c.body : new TextDecoder().decode(c.body ?? new Uint8Array());
    const v = JSON.parse(text) as unknown;
    return v && typeof v === 'object' ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

async function parseVideoBody(c: UpstreamCall): Promise<Record<string, unknown> | null> {
  const type = c.headers['content-type'] ?? '';
  if (!type.startsWith('multipart/form-data')) return parseBody(c);
  const form = await new Response((c.body ?? '') as BodyInit, { headers: { 'content-type': type } }).formData();
  const out: Record<string, unknown> = {};
  for (const [k, v] of form.entries()) if (typeof v === 'string') out[k] = v;
  return out;
}

export function createMediaSimulator(opts: MediaSimulatorOptions, _tokenizer: Tokenizer): MediaSimulator {
  const videos = new Map<string, SimVideo>();
  const badRequest = (message: string) => jsonResponse(400, { error: { message, type: 'invalid_request_error', code: null, param: null } });

  const videoView = (v: SimVideo) => {
    const elapsed = Date.now() - v.createdAt;
    const done = elapsed >= opts.videoDurationMs;
    const progress = done ? 100 : Math.floor((100 * elapsed) / Math.max(1, opts.videoDurationMs));
    const status = done ? (v.fail ? 'failed' : 'completed') : progress < 10 ? 'queued' : 'in_progress';
    return {
      id: v.id,
      object: 'video',
      model: v.model,
      status,
      progress,
      created_at: Math.floor(v.createdAt / 1000),
      completed_at: done ? Math.floor((v.createdAt + opts.videoDurationMs) / 1000) : null,
      expires_at: null,
      prompt: v.prompt,
      seconds: v.seconds,
      size: v.size,
      remixed_from_video_id: null,
      error: done && v.fail ? { code: 'generation_failed', message: 'The simulated generation failed.' } : null,
    };
  };

  return {
    async handle(c) {
      if (c.method === 'POST' && c.path === '/images/generations') {
        const body = parseBody(c);
        if (!body) return badRequest('invalid JSON');
        await sleep(opts.imageDelayMs, c.signal);
        if (String(body.prompt).includes('[fail]')) {
          return jsonResponse(500, { error: { message: 'simulated failure', type: 'server_error', code: null, param: null } });
        }
        const n = typeof body.n === 'number' ? body.n : 1;
        const asUrl = body.response_format === 'url';
        const data = Array.from({ length: n }, () =>
          asUrl ? { url: `data:image/png;base64,${PNG_1X1}` } : { b64_json: PNG_1X1 },
        );
        return jsonResponse(200, { created: Math.floor(Date.now() / 1000), data });
      }
      if (c.method === 'POST' && c.path === '/audio/speech') {
        const body = parseBody(c);
        if (!body) return badRequest('invalid JSON');
        const format = typeof body.response_format === 'string' ? body.response_format : 'mp3';
        if (format === 'mp3') return bytesResponse(200, silentMp3(10), { 'content-type': 'audio/mpeg' });
        if (format === 'wav') return bytesResponse(200, silence(250, true), { 'content-type': 'audio/wav' });
        if (format === 'pcm') return bytesResponse(200, silence(250, false), { 'content-type': 'audio/pcm' });
        return badRequest(`the simulator synthesises mp3, wav and pcm, not ${format}`);
      }
      if (c.method === 'POST' && c.path === '/videos') {
        const body = await parseVideoBody(c);
        if (!body) return badRequest('invalid body');
        const v: SimVideo = {
          id: `sim_video_${randomUUID()}`,
          model: String(body.model),
          prompt: String(body.prompt),
          seconds: String(body.seconds ?? '4'),
          size: String(body.size ?? SIZE_OF_RESOLUTION[String(body.resolution)] ?? '720x1280'),
          createdAt: Date.now(),
          fail: String(body.prompt).includes('[fail]'),
        };
        videos.set(v.id, v);
        return jsonResponse(200, videoView(v));
      }
      const m = /^\/videos\/([^/]+)(\/content)?$/.exec(c.path.split('?')[0] ?? '');
      if (c.method === 'GET' && m) {
        const v = videos.get(decodeURIComponent(m[1]!));
        if (!v) return jsonResponse(404, { error: { message: 'no such video', type: 'invalid_request_error', code: null, param: null } });
        if (!m[2]) return jsonResponse(200, videoView(v));
        if (videoView(v).status !== 'completed') return badRequest('video is not completed');
        return bytesResponse(200, placeholderMp4(), { 'content-type': 'video/mp4' });
      }
      return null;
    },
    close() {
      videos.clear();
    },
  };
}
