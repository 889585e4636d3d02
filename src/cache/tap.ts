/**
 * A stream's frames, as the client gets them, read into the cache's collector on their way
 * out: the reader is unchanged otherwise. The entry is written once the answer is complete and
 * settled, before its last frames go out (see `StreamCall.complete`).
 */
import { type AnswerAccount, finalUsage } from '../billing/answer.js';
import { type EventReader, overReader } from '../upstream/stream/reader.js';
import { SseParser } from '../upstream/stream/sse.js';
import type { CacheTicket } from './cache.js';
import type { Collector } from './format.js';

export function tapReader(reader: EventReader, collector: Collector): EventReader {
  const parser = new SseParser();
  const seen = (frames: Uint8Array[]) => {
    for (const f of frames) for (const data of parser.push(f)) collector.event(data);
    return frames;
  };
  return overReader(reader, { frames: seen });
}

/**
 * Stores a complete stream's answer: only when its usage is final (none of its output came
 * after the report), since a hit is priced from that usage; otherwise the next call misses.
 */
export function storeStream(ticket: CacheTicket, collector: Collector, account: AnswerAccount): Promise<void> {
  const usage = finalUsage(account);
  if (!usage) return Promise.resolve();
  const body = collector.body(usage);
  return body ? ticket.store({ body, usage, tools: account.tools?.() ?? null }) : Promise.resolve();
}
