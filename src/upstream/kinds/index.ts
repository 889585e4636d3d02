/** The kinds an upstream may speak, and the translated call and answer the billed call uses. */
import type { AnswerAccount } from '../../billing/answer.js';
import type { Kind, StreamTranslator, Translation, UpstreamKind } from './types.js';
import { anthropicKind } from './anthropic.js';
import { geminiKind } from './gemini.js';
import { openaiKind } from './openai.js';
import type { UpstreamResponse } from '../types.js';

export type { Kind, StreamTranslator, Translation, UpstreamKind } from './types.js';
export { compose } from './compose.js';

const kinds: Record<UpstreamKind, Kind> = {
  openai: openaiKind,
  anthropic: anthropicKind,
  gemini: geminiKind,
};

export function kindOf(kind: UpstreamKind | undefined): Kind {
  return kinds[kind ?? 'openai'];
}

/** The configured kind of a named upstream (`openai` for the simulator without one and for an embedder's client). */
export function upstreamKindOf(upstreams: Record<string, unknown>, name: string): UpstreamKind {
  const u = upstreams[name];
  const kind = u && typeof u === 'object' && 'kind' in u ? (u as { kind?: unknown }).kind : undefined;
  return kind === 'anthropic' || kind === 'gemini' ? kind : 'openai';
}

/** A translated answer, and its account as the upstream's own format says it (what it is billed by). */
export interface TranslatedAnswer {
  res: UpstreamResponse;
  /** The account of the upstream's answer: a stream's fills as it is read; a plain one's once its text was read. */
  account(): AnswerAccount | null;
}

/**
 * The upstream's answer as the ingress API's: a 2xx plain answer is translated when read, a
 * streamed one as it arrives; any other status passes as it came (its error is read as the
 * upstream's, whatever its shape). Either way the upstream's answer is read into the answer
 * model by its own format's reader, so the translation never decides what is billed.
 */
export function translatedResponse(res: UpstreamResponse, translation: Translation, stream: boolean, request?: Record<string, unknown>): TranslatedAnswer {
  if (res.status < 200 || res.status >= 300) return { res, account: () => null };
  let account: AnswerAccount | null = null;
  const converter = stream ? translation.stream(request) : null;
  if (converter?.account) account = converter.account;
  const translated: UpstreamResponse = {
    status: res.status,
    header: (name) => (name.toLowerCase() === 'content-type' ? (stream ? 'text/event-stream' : 'application/json') : res.header(name)),
    body: converter ? translateStream(res.body, converter) : res.body,
    async text() {
      const parsed = JSON.parse(await res.text()) as unknown;
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
      const body = parsed as Record<string, unknown>;
      const answer = translation.answer(body, request);
      account = translation.read(body);
      return JSON.stringify(answer);
    },
    discard: () => res.discard(),
  };
  return { res: translated, account: () => account };
}

async function* translateStream(body: AsyncIterable<Uint8Array>, converter: StreamTranslator): AsyncIterable<Uint8Array> {
  for await (const chunk of body) yield* converter.push(chunk);
  yield* converter.end();
}
