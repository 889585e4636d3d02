/**
 * The two shapes a call is measured in, and what each relay must answer in each.
 *
 * - kind: the client asks for `stream_options.include_usage` and a `max_tokens`, and the
 *   upstream answers with the very name the gateway lists, so the gateway passes a stream's
 *   bytes through untouched. Every run before the real shape existed measured only this one.
 * - real: what the official `openai` SDK sends by default, to an alias: no `stream_options`,
 *   no `max_tokens`. The gateway adds `stream_options.include_usage` and its output cap, the
 *   upstream answers with its own dated model name, and the gateway rewrites that name in the
 *   plain answer and in every event and drops the usage chunk its client did not ask for.
 *
 * The upstream writes the usage chunk whether it was asked for or not (bench/upstream.ts), so
 * every relay reads the same 22 events in both shapes and the per-event figure's 11 extra reads
 * hold for all of them. A relay that passes the upstream's bytes through (the bare relay, the
 * peer) so hands its client that chunk too: in the real shape it writes one event more per
 * call than the gateway, which errs slightly in the gateway's favour.
 */
import {
  ALIAS_MODEL,
  ALIAS_SERVED_AS,
  answersNaming,
  DONE,
  MESSAGES,
  markedUser,
  PACED_MARK,
  PACED_REQUEST,
  PAIRED_MARK,
  PAIRED_REQUEST,
  PLAIN_BODY,
  PLAIN_REQUEST,
  STREAM_BODY,
  STREAM_REQUEST,
} from './fixtures.js';
import type { Kind, Shape } from './report.js';

/** The request a client sends in the real shape: the SDK's defaults, to the alias. */
function realRequest(kind: Kind): string {
  if (kind === 'plain') return JSON.stringify({ model: ALIAS_MODEL, messages: MESSAGES });
  const mark = kind === 'paced' ? PACED_MARK : kind === 'paired' ? PAIRED_MARK : null;
  const messages = mark === null ? MESSAGES : [MESSAGES[0], { role: 'user', content: markedUser(mark) }];
  return JSON.stringify({ model: ALIAS_MODEL, messages, stream: true });
}

/** What the upstream writes in the real shape: its own dated name, the usage chunk always. */
const SERVED = answersNaming(ALIAS_SERVED_AS);
/** What the gateway writes back: the alias in every event, no usage chunk (nobody asked). */
const ALIASED = answersNaming(ALIAS_MODEL);

const REAL = {
  request: { plain: realRequest('plain'), stream: realRequest('stream'), paced: realRequest('paced'), paired: realRequest('paired') },
  gatewayPlain: ALIASED.plain.toString(),
  gatewayStream: Buffer.concat([...ALIASED.events, DONE]).toString(),
  relayedPlain: SERVED.plain.toString(),
  relayedStream: Buffer.concat([...SERVED.events, SERVED.usage, DONE]).toString(),
};
const KIND_REQUEST: Record<Kind, string> = { plain: PLAIN_REQUEST, stream: STREAM_REQUEST, paced: PACED_REQUEST, paired: PAIRED_REQUEST };

/** The body a client sends for a call of this kind in this shape. */
export const requestOf = (shape: Shape, kind: Kind): string => (shape === 'kind' ? KIND_REQUEST[kind] : REAL.request[kind]);

/** Who answers: the gateway, or a relay that passes the upstream's answer through (bare relay, peer). */
export type Answerer = 'gateway' | 'relay';

/** The exact body a client must receive for a call of this kind in this shape. */
export function answerOf(shape: Shape, kind: Kind, who: Answerer): string {
  // In the kind shape the gateway's answer is the upstream's, byte for byte.
  if (shape === 'kind') return kind === 'plain' ? PLAIN_BODY : STREAM_BODY;
  if (who === 'gateway') return kind === 'plain' ? REAL.gatewayPlain : REAL.gatewayStream;
  return kind === 'plain' ? REAL.relayedPlain : REAL.relayedStream;
}
