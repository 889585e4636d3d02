/**
 * A small OpenAI-compatible media upstream for tests (node:http on 127.0.0.1): images,
 * speech and video jobs whose progress the test drives by hand, so nothing depends on timing.
 * Several gateways can share it (e.g. two instances tracking one upstream video job).
 *
 *   const up = await startMediaUpstream();
 *   const gate = up.holdImages();          // image answers wait until gate.open()
 *   ... POST /v1/images/generations via the gateway -> 202 ...
 *   gate.open();
 *   up.finishVideo(up.videos()[0].id);     // the upstream video job is now completed
 *
 * A prompt containing "[fail]" makes an image answer 500 and a video job end `failed` (one
 * with "[cancelled]" ends `cancelled`, as a provider that cancels a job on its side says); one
 * containing "[slow-submit]" makes a video submission answer a second after it created the job.
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface MediaRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  contentType: string;
  raw: Buffer;
  /** JSON body, or the string fields of a multipart body. */
  fields: Record<string, unknown>;
}

export interface UpstreamVideo {
  id: string;
  model: string;
  prompt: string;
  seconds: string;
  size: string;
  status: 'queued' | 'in_progress' | 'completed' | 'failed' | 'cancelled';
  progress: number;
}

export interface MediaUpstream {
  /** Base URL with /v1: configure it as an upstream's baseUrl. */
  url: string;
  requests: MediaRequest[];
  /** From now on image answers wait until the returned gate is opened. */
  holdImages(): { open(): void };
  /** Image requests received so far (their bodies read). */
  imageRequests(): MediaRequest[];
  /** Image answers written so far. */
  imagesAnswered(): number;
  videos(): UpstreamVideo[];
  /** Marks an upstream video job completed (or failed: its prompt holds "[fail]"). */
  finishVideo(id: string): void;
  setVideoProgress(id: string, progress: number): void;
  /** Bytes served as every finished clip. */
  clip: Buffer;
  close(): Promise<void>;
}

const PNG_1X1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

async function fieldsOf(contentType: string, raw: Buffer): Promise<Record<string, unknown>> {
  if (contentType.startsWith('multipart/form-data')) {
    const form = await new Response(new Uint8Array(raw), { headers: { 'content-type': contentType } }).formData();
    const out: Record<string, unknown> = {};
    for (const [k, v] of form.entries()) if (typeof v === 'string') out[k] = v;
    return out;
  }
  try {
    const v = JSON.parse(raw.toString('utf8')) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

export async function startMediaUpstream(): Promise<MediaUpstream> {
  const requests: MediaRequest[] = [];
  const videos = new Map<string, UpstreamVideo>();
  let imageGate: Promise<void> | null = null;
  let nextVideo = 1;
  let imagesAnswered = 0;
  const clip = Buffer.concat([Buffer.from([0, 0, 0, 24]), Buffer.from('ftypisom-test-upstream-clip')]);
  const sockets = new Set<Socket>();

  const send = (res: ServerResponse, status: number, body: unknown) => {
    if (res.destroyed) return;
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const videoView = (v: UpstreamVideo) => ({
    id: v.id,
    object: 'video',
    model: v.model,
    status: v.status,
    progress: v.progress,
    seconds: v.seconds,
    size: v.size,
    error: v.status === 'failed' ? { code: 'upstream_generation_failed', message: 'The test upstream failed the video.' } : null,
  });

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const parts: Buffer[] = [];
    for await (const p of req) parts.push(p as Buffer);
    const raw = Buffer.concat(parts);
    const contentType = req.headers['content-type'] ?? '';
    const rec: MediaRequest = {
      method: req.method ?? '',
      path: (req.url ?? '').replace(/^\/v1/, ''),
      headers: req.headers,
      contentType,
      raw,
      fields: await fieldsOf(contentType, raw),
    };
    requests.push(rec);
    const path = rec.path.split('?')[0] ?? '';

    if (rec.method === 'POST' && path === '/images/generations') {
      if (imageGate) await imageGate;
      imagesAnswered++;
      if (String(rec.fields.prompt).includes('[fail]')) {
        return send(res, 500, { error: { message: 'test upstream image failure', type: 'server_error', code: null } });
      }
      const n = typeof rec.fields.n === 'number' ? rec.fields.n : 1;
      return send(res, 200, { created: 1_700_000_000, data: Array.from({ length: n }, () => ({ b64_json: PNG_1X1 })) });
    }
    if (rec.method === 'POST' && path === '/audio/speech') {
      const format = typeof rec.fields.response_format === 'string' ? rec.fields.response_format : 'mp3';
      res.writeHead(200, { 'content-type': format === 'mp3' ? 'audio/mpeg' : `audio/${format}` });
      res.end(Buffer.alloc(64, 1));
      return;
    }
    if (rec.method === 'POST' && path === '/videos') {
      const v: UpstreamVideo = {
        id: `up_video_${nextVideo++}`,
        model: String(rec.fields.model),
        prompt: String(rec.fields.prompt),
        seconds: String(rec.fields.seconds ?? '4'),
        size: String(rec.fields.size ?? '720x1280'),
        status: 'queued',
        progress: 0,
      };
      videos.set(v.id, v);
      // Accepted, but the answer comes late (past a short upstream timeout): the job exists either way.
      if (v.prompt.includes('[slow-submit]')) await new Promise((r) => setTimeout(r, 1_000));
      if (res.destroyed) return;
      return send(res, 200, videoView(v));
    }
    const m = /^\/videos\/([^/]+)(\/content)?$/.exec(path);
    if (rec.method === 'GET' && m) {
      const v = videos.get(decodeURIComponent(m[1]!));
      if (!v) return send(res, 404, { error: { message: 'no such video', type: 'invalid_request_error', code: null } });
      if (!m[2]) return send(res, 200, videoView(v));
      if (v.status !== 'completed') return send(res, 400, { error: { message: 'not completed', type: 'invalid_request_error' } });
      res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': String(clip.length) });
      res.end(clip);
      return;
    }
    send(res, 404, { error: { message: `no route ${rec.method} ${path}`, type: 'invalid_request_error', code: null } });
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.destroyed) res.destroy();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    clip,
    holdImages() {
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      imageGate = gate;
      return {
        open() {
          if (imageGate === gate) imageGate = null;
          open();
        },
      };
    },
    imageRequests: () => requests.filter((r) => r.method === 'POST' && r.path === '/images/generations'),
    imagesAnswered: () => imagesAnswered,
    videos: () => [...videos.values()],
    finishVideo(id) {
      const v = videos.get(id);
      if (!v) throw new Error(`no upstream video ${id}`);
      v.status = v.prompt.includes('[fail]') ? 'failed' : v.prompt.includes('[cancelled]') ? 'cancelled' : 'completed';
      v.progress = 100;
    },
    setVideoProgress(id, progress) {
      const v = videos.get(id);
      if (!v) throw new Error(`no upstream video ${id}`);
      v.status = 'in_progress';
      v.progress = progress;
    },
    async close() {
      const closing = new Promise<void>((r) => server.close(() => r()));
      for (const s of sockets) s.destroy();
      server.closeAllConnections();
      await closing;
    },
  };
}
