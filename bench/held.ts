/**
 * Memory under held streams: `count` streamed calls opened through a target and kept open
 * by the slow upstream, the target's RSS compared with its idle RSS just before.
 */
import { request, type IncomingMessage } from 'node:http';
import { HELD_REQUEST } from './fixtures.js';
import { memoryOf, sleep } from './procs.js';

export interface HeldSpec {
  /** Target origin, e.g. http://127.0.0.1:1234 */
  url: string;
  path: string;
  headers: Record<string, string>;
  pid: number;
  /** The upstream origin (for /__held and /__release). */
  upstreamUrl: string;
  count: number;
  /** Streams opened at a time (each batch waits for its first events). */
  batch?: number;
  /** How long RSS is watched once every stream is open. */
  holdMs?: number;
}

export interface HeldResult {
  count: number;
  opened: number;
  /** Streams the upstream saw held at once (should equal `count`). */
  upstreamHeld: number;
  completed: number;
  errors: number;
  firstError?: string;
  openSeconds: number;
  /** Bytes. */
  idleRss: number;
  heldRss: number;
  heldPeakRss: number;
  growth: number;
  perStreamKb: number;
  afterReleaseRss: number;
}

interface Stream {
  opened: Promise<void>;
  finished: Promise<string | null>;
}

function openStream(spec: HeldSpec): Stream {
  let markOpened!: () => void;
  let failOpen!: (err: Error) => void;
  const opened = new Promise<void>((res, rej) => {
    markOpened = res;
    failOpen = rej;
  });
  const finished = new Promise<string | null>((resolve) => {
    const u = new URL(spec.path, spec.url);
    const req = request(
      {
        hostname: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', ...spec.headers },
      },
      (res: IncomingMessage) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (s: string) => {
          body += s;
          if (body.includes('data: ')) markOpened();
        });
        res.on('end', () => {
          if (res.statusCode !== 200) return done(`status ${res.statusCode}: ${body.slice(0, 200)}`);
          if (body.includes('"error"')) return done(`error event: ${body.slice(body.indexOf('"error"'), 300)}`);
          if (!body.endsWith('data: [DONE]\n\n')) return done('stream ended without [DONE]');
          done(null);
        });
        res.on('error', (err) => done(err.message));
      },
    );
    const done = (err: string | null) => {
      if (err) failOpen(new Error(err));
      resolve(err);
    };
    req.on('error', (err) => done(err.message));
    req.setTimeout(180_000, () => req.destroy(new Error('client timeout')));
    req.end(HELD_REQUEST);
  });
  opened.catch(() => undefined);
  return { opened, finished };
}

async function upstreamCall(upstreamUrl: string, path: string, method: string): Promise<Record<string, number>> {
  const res = await fetch(new URL(path, upstreamUrl), { method });
  return (await res.json()) as Record<string, number>;
}

/** Mean VmRSS over `ms`. */
async function steadyRss(pid: number, ms: number): Promise<{ mean: number; peak: number }> {
  let sum = 0;
  let n = 0;
  let peak = 0;
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const m = memoryOf(pid);
    if (m) {
      sum += m.rss;
      n++;
      peak = Math.max(peak, m.rss);
    }
    await sleep(100);
  }
  return { mean: n ? sum / n : NaN, peak };
}

export async function heldStreams(spec: HeldSpec): Promise<HeldResult> {
  const batch = spec.batch ?? 250;
  const idle = await steadyRss(spec.pid, 1_000);
  let peakDuringOpen = 0;
  const streams: Stream[] = [];
  const t0 = Date.now();
  let openErrors = 0;
  for (let i = 0; i < spec.count; i += batch) {
    const group: Stream[] = [];
    for (let j = i; j < Math.min(spec.count, i + batch); j++) group.push(openStream(spec));
    streams.push(...group);
    const settled = await Promise.allSettled(group.map((s) => s.opened));
    openErrors += settled.filter((s) => s.status === 'rejected').length;
    peakDuringOpen = Math.max(peakDuringOpen, memoryOf(spec.pid)?.rss ?? 0);
  }
  const openSeconds = (Date.now() - t0) / 1000;
  const upstreamHeld = (await upstreamCall(spec.upstreamUrl, '/__held', 'GET')).open ?? 0;
  const held = await steadyRss(spec.pid, spec.holdMs ?? 3_000);
  await upstreamCall(spec.upstreamUrl, '/__release', 'POST');
  const results = await Promise.all(streams.map((s) => s.finished));
  const failures = results.filter((r): r is string => r !== null);
  await sleep(500);
  const after = memoryOf(spec.pid)?.rss ?? NaN;
  const heldPeakRss = Math.max(held.peak, peakDuringOpen);
  return {
    count: spec.count,
    opened: spec.count - openErrors,
    upstreamHeld,
    completed: results.length - failures.length,
    errors: failures.length,
    ...(failures[0] ? { firstError: failures[0] } : {}),
    openSeconds,
    idleRss: idle.mean,
    heldRss: held.mean,
    heldPeakRss,
    growth: heldPeakRss - idle.mean,
    perStreamKb: (held.mean - idle.mean) / spec.count / 1024,
    afterReleaseRss: after,
  };
}
