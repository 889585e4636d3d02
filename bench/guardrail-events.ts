/**
 * What an output guardrail costs per streamed event: the benchmark's own streamed answer (its
 * 20 content chunks, the usage chunk and [DONE], one event per read as a model streaming
 * tokens sends them) read by the gateway's chat event reader, bare and with the output
 * guardrails over it (a `pii` redact of every entity and a `regex` block), in this process.
 * Everything else a guarded stream does is what an unguarded one does, so the difference is
 * the guardrails' own cost per event.
 *
 * Beside them, unguarded, the real shape's answer (an alias the upstream answers under its
 * own dated name, a client that did not ask for usage): the reader renames the model in every
 * event's bytes and drops the usage chunk. That is the gateway's own work per streamed event in
 * the shape the judged per-event figure is taken in, measured without the relay around it,
 * whose end-to-end figure moves by tens of µs between rounds. Rounds run the three readers in
 * alternating order, and the median of each is reported.
 *
 *   node --import tsx bench/guardrail-events.ts      (npm run bench runs it too)
 */
import { pathToFileURL } from 'node:url';
import { compileGuardrail } from '../src/guardrails/guardrail.js';
import { guardedEvents } from '../src/guardrails/output-stream.js';
import type { OutputFinder } from '../src/guardrails/scanner.js';
import { guardrailSchema } from '../src/options/guardrails.js';
import { createChatEvents } from '../src/upstream/stream/chat-events.js';
import type { EventReader } from '../src/upstream/stream/reader.js';
import { ALIAS_MODEL, ALIAS_SERVED_AS, ALIAS_UPSTREAM_MODEL, answersNaming, DONE, MODEL, STREAM_EVENTS, USAGE_EVENT } from './fixtures.js';
import { type GuardrailEventCost, guardrailEventLines } from './guardrail-report.js';

export type { GuardrailEventCost } from './guardrail-report.js';

const READS: Uint8Array[] = [...STREAM_EVENTS, USAGE_EVENT, DONE];
const REAL = answersNaming(ALIAS_SERVED_AS);
const REAL_READS: Uint8Array[] = [...REAL.events, REAL.usage, DONE];

/** The kind shape (the listed model, usage asked for) or the real one (an alias, usage not asked for). */
const newReader = (real: boolean): EventReader =>
  real
    ? createChatEvents({ model: { id: ALIAS_MODEL, upstreamModel: ALIAS_UPSTREAM_MODEL }, apiKey: '', clientWantsUsage: false })
    : createChatEvents({ model: { id: MODEL, upstreamModel: MODEL }, apiKey: '', clientWantsUsage: true });

function finders(): OutputFinder[] {
  return [
    { id: 'pii', kind: 'pii', on: ['output'], action: 'redact' },
    { id: 'codename', kind: 'regex', on: ['output'], patterns: ['project\\s+nightfall'], action: 'block' },
  ].flatMap((c) => {
    const g = compileGuardrail(guardrailSchema.parse(c));
    return g.finders.map((f) => ({ ...f, guardrail: g.id, block: g.action === 'block' }));
  });
}

/** µs per event over `streams` streams, each read one event per push. */
function timeStreams(streams: number, guard: OutputFinder[] | null, real = false): number {
  const reads = real ? REAL_READS : READS;
  let sink = 0;
  const start = process.cpuUsage();
  for (let s = 0; s < streams; s++) {
    let reader = newReader(real);
    if (guard) reader = guardedEvents(reader, 'chat', guard, () => {});
    for (const read of reads) for (const frame of reader.push(read)) sink += frame.byteLength;
    for (const frame of reader.end()) sink += frame.byteLength;
    if (!reader.done || sink === 0) throw new Error('the stream did not end');
  }
  const used = process.cpuUsage(start);
  return (used.user + used.system) / (streams * reads.length);
}

/**
 * The real shape's reader does what the gateway's does before it is timed: every event renamed
 * to the alias, the usage chunk dropped, the answer ended (a reader that forwarded the bytes
 * untouched would be faster and wrong).
 */
function checkRealShape(): void {
  const reader = newReader(true);
  const frames = [...REAL_READS.flatMap((read) => reader.push(read)), ...reader.end()];
  // The relay ends the stream with the reader's end frame unless the reader's frames did.
  if (!reader.doneFramed && reader.endFrame) frames.push(reader.endFrame);
  const out = Buffer.concat(frames).toString();
  const events = out.split('\n\n').filter((e) => e !== '');
  const renamed = events.filter((e) => e.includes(`"model":"${ALIAS_MODEL}"`)).length;
  if (!reader.done || renamed !== REAL.events.length || out.includes(ALIAS_SERVED_AS) || out.includes('"usage"') || events.at(-1) !== 'data: [DONE]') {
    throw new Error(`the real shape's stream was not relayed as the gateway relays it: ${out.slice(0, 300)}`);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export function guardrailEventCost(streams = 4000, rounds = 5): GuardrailEventCost {
  const guard = finders();
  checkRealShape();
  // Warm each reader up (JIT) before measuring.
  timeStreams(500, null);
  timeStreams(500, guard);
  timeStreams(500, null, true);
  const bare: number[] = [];
  const guarded: number[] = [];
  const real: number[] = [];
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) {
      bare.push(timeStreams(streams, null));
      guarded.push(timeStreams(streams, guard));
      real.push(timeStreams(streams, null, true));
    } else {
      real.push(timeStreams(streams, null, true));
      guarded.push(timeStreams(streams, guard));
      bare.push(timeStreams(streams, null));
    }
  }
  const bareUs = median(bare);
  const guardedUs = median(guarded);
  return { events: READS.length, streams, rounds, bareUs, guardedUs, addedUs: guardedUs - bareUs, realUs: median(real) };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const c = guardrailEventCost(Number(process.env.BENCH_GUARDRAIL_STREAMS ?? 4000));
  console.log(guardrailEventLines(c).join('\n'));
}
