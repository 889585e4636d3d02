/**
 * What an output guardrail costs per streamed event: the benchmark's own streamed answer (its
 * 20 content chunks, the usage chunk and [DONE], one event per read as a model streaming
 * tokens sends them) read by the gateway's chat event reader, bare and with the output
 * guardrails over it (a `pii` redact of every entity and a `regex` block), in this process.
 * Everything else a guarded stream does is what an unguarded one does, so the difference is
 * the guardrails' own cost per event. Rounds alternate the two, and the median is reported.
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
import { DONE, MODEL, STREAM_EVENTS, USAGE_EVENT } from './fixtures.js';
import { type GuardrailEventCost, guardrailEventLines } from './guardrail-report.js';

export type { GuardrailEventCost } from './guardrail-report.js';

const READS: Uint8Array[] = [...STREAM_EVENTS, USAGE_EVENT, DONE];

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
function timeStreams(streams: number, guard: OutputFinder[] | null): number {
  let sink = 0;
  const start = process.cpuUsage();
  for (let s = 0; s < streams; s++) {
    let reader: EventReader = createChatEvents({ model: { id: MODEL, upstreamModel: MODEL }, apiKey: '', clientWantsUsage: true });
    if (guard) reader = guardedEvents(reader, 'chat', guard, () => {});
    for (const read of READS) for (const frame of reader.push(read)) sink += frame.byteLength;
    for (const frame of reader.end()) sink += frame.byteLength;
    if (!reader.done || sink === 0) throw new Error('the stream did not end');
  }
  const used = process.cpuUsage(start);
  return (used.user + used.system) / (streams * READS.length);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export function guardrailEventCost(streams = 4000, rounds = 5): GuardrailEventCost {
  const guard = finders();
  // Warm both paths up (JIT) before measuring.
  timeStreams(500, null);
  timeStreams(500, guard);
  const bare: number[] = [];
  const guarded: number[] = [];
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) {
      bare.push(timeStreams(streams, null));
      guarded.push(timeStreams(streams, guard));
    } else {
      guarded.push(timeStreams(streams, guard));
      bare.push(timeStreams(streams, null));
    }
  }
  const bareUs = median(bare);
  const guardedUs = median(guarded);
  return { events: READS.length, streams, rounds, bareUs, guardedUs, addedUs: guardedUs - bareUs };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const c = guardrailEventCost(Number(process.env.BENCH_GUARDRAIL_STREAMS ?? 4000));
  console.log(guardrailEventLines(c).join('\n'));
}
