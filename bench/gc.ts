/**
 * What the young-generation garbage collector costs per call, the gateway beside the bare
 * relay: how many bytes of each call outlive two scavenges (promoted to the old generation, to
 * be marked and swept later), how many are copied once, and the CPU the collector spends per
 * call (the main thread's pauses plus its helper threads' work, which the process's CPU counts
 * too). A scavenge costs what survives it, not what was allocated: a relay whose per-call state
 * dies young pays little however much it allocates.
 *
 *   node --import tsx bench/gc.ts                  # memory, real shape, plain / stream / paced
 *   GC_KINDS=paced GC_STORAGE=sqlite GC_SECONDS=8 node --import tsx bench/gc.ts
 *
 * Each relay runs under --trace-gc-nvp (one line per collection on its stdout); after 3 s of
 * unmeasured load, the lines of the measured run (c = 50, its first second not counted for
 * CPU) are summed and divided by the calls answered while they were printed.
 *
 * Environment (defaults in brackets):
 *   GC_DIST [dist]            the gateway build folder
 *   GC_FLAGS []               more Node flags for the gateway, e.g. "--max-semi-space-size=32"
 *   GC_STORAGE [memory]       memory | sqlite (a temp file)
 *   GC_SHAPE [real]           real | kind (see bench/shapes.ts)
 *   GC_KINDS [plain,stream,paced]
 *   GC_SECONDS [6]            measured seconds per run
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gatewayConfig } from './fixtures.js';
import { runLoad } from './load.js';
import { type Child, startNode } from './procs.js';
import type { Kind, Shape } from './report.js';
import { answerOf, requestOf } from './shapes.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const env = process.env;
const DIST = env.GC_DIST ?? 'dist';
const FLAGS = (env.GC_FLAGS ?? '').split(/\s+/).filter(Boolean);
const STORAGE = env.GC_STORAGE ?? 'memory';
const SHAPE: Shape = env.GC_SHAPE === 'kind' ? 'kind' : 'real';
const KINDS = (env.GC_KINDS ?? 'plain,stream,paced').split(',') as Kind[];
const SECONDS = Number(env.GC_SECONDS ?? 6);
if (!['memory', 'sqlite'].includes(STORAGE)) throw new Error(`GC_STORAGE: memory or sqlite, not ${STORAGE}`);
for (const k of KINDS) if (!['plain', 'stream', 'paced', 'paired'].includes(k)) throw new Error(`GC_KINDS: unknown kind ${k}`);

/** One collection as --trace-gc-nvp prints it: its kind (s: scavenge, mc: mark-compact, ...) and its figures. */
interface Collection {
  kind: string;
  pauseMs: number;
  helperMs: number;
  promoted: number;
  survived: number;
}

const field = (line: string, name: string): number => {
  const m = new RegExp(`(?:^|\\s)${name.replaceAll('.', '\\.')}=([\\d.]+)`).exec(line);
  return m ? Number(m[1]) : 0;
};

export function parseCollection(line: string): Collection | null {
  const kind = /\sgc=(\w+)/.exec(line)?.[1];
  if (!kind) return null;
  return {
    kind,
    pauseMs: field(line, 'pause'),
    // The scavenger's helper threads; a mark-compact's concurrent marking is not in its line.
    helperMs: field(line, 'background.scavenge.parallel'),
    promoted: field(line, 'promoted'),
    survived: field(line, 'new_space_survived'),
  };
}

/** Collects a child's --trace-gc-nvp lines while `recording` is on. */
function watch(child: Child): { start(): void; stop(): Collection[] } {
  let recording = false;
  let seen: Collection[] = [];
  let rest = '';
  child.proc.stdout!.on('data', (s: string) => {
    const lines = (rest + s).split('\n');
    rest = lines.pop() ?? '';
    if (!recording) return;
    for (const line of lines) {
      const c = parseCollection(line);
      if (c) seen.push(c);
    }
  });
  return {
    start() {
      seen = [];
      recording = true;
    },
    stop() {
      recording = false;
      return seen;
    },
  };
}

const KEY = `sk-mg-${randomBytes(24).toString('hex')}`;
const children: Child[] = [];
// Made by main(): importing this module (its parser's test does) leaves nothing behind.
let tmp = '';

async function main(): Promise<void> {
  tmp = mkdtempSync(join(tmpdir(), 'model-gateway-gc-'));
  const upstream = await startNode('upstream', ['--import', 'tsx', 'bench/upstream.ts', '--writes', 'single'], ROOT);
  children.push(upstream);
  const bare = await startNode('bare relay', ['--trace-gc-nvp', '--import', 'tsx', 'bench/bare-relay.ts', '--upstream', upstream.url, '--connections', '256'], ROOT);
  children.push(bare);
  const storage = STORAGE === 'sqlite' ? { driver: 'sqlite', path: join(tmp, 'gateway.db') } : { driver: 'memory' };
  const file = join(tmp, 'gateway.json');
  writeFileSync(file, JSON.stringify(gatewayConfig({ upstreamUrl: upstream.url, key: KEY, storage, journalDir: STORAGE === 'memory' ? null : join(tmp, 'journal'), observe: true })));
  const gateway = await startNode('gateway', ['--trace-gc-nvp', ...FLAGS, resolve(ROOT, DIST, 'cli.js'), 'serve', '--config', file, '--port', '0'], ROOT);
  children.push(gateway);

  const relays = [
    { name: 'bare relay', child: bare, auth: false },
    { name: `gateway, ${STORAGE}${FLAGS.length ? ` ${FLAGS.join(' ')}` : ''}`, child: gateway, auth: true },
  ];
  const watches = new Map(relays.map((r) => [r, watch(r.child)]));
  process.stdout.write(`${SHAPE} shape, c = 50, ${SECONDS} s measured per run; per call: bytes promoted (outlived two scavenges), bytes copied once, collector CPU (pauses + helper threads), process CPU\n\n`);
  process.stdout.write('| kind | relay | calls | scavenges | promoted KB/call | copied KB/call | GC CPU µs/call | of which helper threads | mark-compacts | process CPU µs/call |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n');
  for (const kind of KINDS) {
    for (const r of relays) {
      const load = (duration: number) =>
        runLoad({
          url: `${r.child.url}/v1/chat/completions`,
          body: requestOf(SHAPE, kind),
          expectBody: answerOf(SHAPE, kind, r.auth ? 'gateway' : 'relay'),
          headers: r.auth ? { authorization: `Bearer ${KEY}` } : {},
          connections: 50,
          duration,
          settleS: 1,
          cpuPids: { target: r.child.pid },
        });
      await load(3);
      const w = watches.get(r)!;
      w.start();
      const res = await load(SECONDS);
      const seen = w.stop();
      if (res.errors) throw new Error(`${r.name} failed ${res.errors} calls: ${JSON.stringify(res.errorDetail)}`);
      // Every call answered while the lines were recorded, the first second's included.
      const calls = res.requests + Math.round(res.rps);
      const scavenges = seen.filter((c) => c.kind === 's');
      const sum = (xs: Collection[], f: (c: Collection) => number) => xs.reduce((a, c) => a + f(c), 0);
      const kb = (bytes: number) => (bytes / calls / 1000).toFixed(1);
      const us = (ms: number) => ((ms * 1000) / calls).toFixed(0);
      process.stdout.write(
        `| ${kind} | ${r.name} | ${calls} | ${scavenges.length} | ${kb(sum(scavenges, (c) => c.promoted))} | ${kb(sum(scavenges, (c) => c.survived))} | ` +
          `${us(sum(seen, (c) => c.pauseMs + c.helperMs))} | ${us(sum(seen, (c) => c.helperMs))} | ${seen.length - scavenges.length} | ${(res.cpuMsPer1k.target ?? NaN).toFixed(0)} |\n`,
      );
    }
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main()
    .catch((err: unknown) => {
      process.stderr.write(`gc failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    })
    .finally(async () => {
      await Promise.allSettled(children.map((c) => c.stop(3_000)));
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    });
}
