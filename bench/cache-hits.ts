/**
 * What a response-cache hit costs the gateway against a plain call: one memory gateway with
 * the cache on, the same plain request sent (a) with `Cache-Control: no-store`, which takes
 * the whole plain path (upstream call, hold, settle) and skips the cache, and (b) as is, after
 * one call stored it, so every call is a hit (lookup, the hit's own hold and charge, the stored
 * answer replayed); and (c) streamed, served as a stream from the same entry. The two are
 * measured in turns in the same process, and the hit's CPU per call is given as a ratio of the
 * plain call's.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gatewayConfig, PLAIN_REQUEST, STREAM_REQUEST } from './fixtures.js';
import { type LoadResult, runLoad } from './load.js';
import { sleep, startNode } from './procs.js';
import { answerOf } from './shapes.js';

export interface CacheHitsResult {
  /** Median CPU µs per call of the gateway process. */
  plainUs: number;
  hitUs: number;
  streamHitUs: number;
  plainRps: number;
  hitRps: number;
  /** hitUs / plainUs. */
  ratio: number;
  errors: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

export async function cacheHits(o: {
  upstreamUrl: string;
  upstreamPid: number;
  key: string;
  dir: string;
  serveArgs: (configFile: string) => string[];
  cwd: string;
  duration: number;
  settleS: number;
  rounds: number;
  connections: number;
}): Promise<CacheHitsResult> {
  const file = join(o.dir, 'gateway-cache.config.json');
  const config = { ...gatewayConfig({ upstreamUrl: o.upstreamUrl, key: o.key, storage: { driver: 'memory' }, journalDir: null, observe: true }), cache: { hitPrice: '0.1' } };
  writeFileSync(file, JSON.stringify(config, null, 2));
  const gw = await startNode('gateway (memory, cache on)', o.serveArgs(file), o.cwd);
  try {
    const url = `${gw.url}/v1/chat/completions`;
    const auth = { authorization: `Bearer ${o.key}` };
    const fixed = PLAIN_REQUEST.replace('[<id>]', 'cached');
    const fixedStream = STREAM_REQUEST.replace('[<id>]', 'cached');
    // Store the entry once (a plain call), so every later call of either form is a hit.
    const first = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: fixed });
    const stored = await first.text();
    if (first.headers.get('x-cache') !== 'MISS') throw new Error(`the cache is not on: X-Cache ${first.headers.get('x-cache')}`);
    await sleep(200);
    const spec = { url, connections: o.connections, duration: o.duration, settleS: o.settleS, cpuPids: { target: gw.pid }, benchPids: [gw.pid, o.upstreamPid] };
    const plain = () => runLoad({ ...spec, body: PLAIN_REQUEST, headers: { ...auth, 'cache-control': 'no-store' }, expectBody: answerOf('kind', 'plain', 'gateway') });
    const hit = () => runLoad({ ...spec, body: fixed, headers: auth, uniqueIds: false, expectBody: stored });
    const streamHit = () =>
      runLoad({ ...spec, body: fixedStream, headers: auth, uniqueIds: false, expectBody: '', verifyBody: (b) => b.includes('"finish_reason":"stop"') && b.endsWith('data: [DONE]\n\n') });
    const runs = { plain: [] as number[], hit: [] as number[], stream: [] as number[], plainRps: [] as number[], hitRps: [] as number[] };
    let errors = 0;
    // A fresh process: JIT and pools warm up on each form before anything is measured.
    for (const warm of [plain, hit, streamHit]) errors += (await warm()).errors;
    for (let round = 0; round < o.rounds; round++) {
      // The order flips every round, so drift on a shared machine favours neither.
      let p: LoadResult;
      let h: LoadResult;
      if (round % 2 === 0) {
        p = await plain();
        h = await hit();
      } else {
        h = await hit();
        p = await plain();
      }
      const s = await streamHit();
      errors += p.errors + h.errors + s.errors;
      runs.plain.push(p.cpuMsPer1k.target ?? NaN);
      runs.hit.push(h.cpuMsPer1k.target ?? NaN);
      runs.stream.push(s.cpuMsPer1k.target ?? NaN);
      runs.plainRps.push(p.rps);
      runs.hitRps.push(h.rps);
    }
    const plainUs = median(runs.plain);
    const hitUs = median(runs.hit);
    return { plainUs, hitUs, streamHitUs: median(runs.stream), plainRps: median(runs.plainRps), hitRps: median(runs.hitRps), ratio: hitUs / plainUs, errors };
  } finally {
    await gw.stop();
  }
}
