/** The kinds an upstream may speak, and the translated call and answer the billed call uses. */
import type { Kind, Translation, UpstreamKind } from './types.js';
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

/**
 * The upstream's answer as the ingress API's: a 2xx plain answer is translated when read, a
 * streamed one as it arrives; any other status passes as it came (its error is read as the
 * upstream's, whatever its shape).
 */
export function translatedResponse(res: UpstreamResponse, translation: Translation, stream: boolean): UpstreamResponse {
  if (res.status < 200 || res.status >= 300) return res;
  const translated: UpstreamResponse = {
    status: res.status,
    header: (name) => (name.toLowerCase() === 'content-type' ? (stream ? 'text/event-stream' : 'application/json') : res.header(name)),
    body: stream ? translateStream(res.body, translation) : res.body,
    async text() {
      const parsed = JSON.parse(await res.text()) as unknown;
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
      return JSON.stringify(translation.answer(parsed as Record<string, unknown>));
    },
    discard: () => res.discard(),
  };
  return translated;
}

async function* translateStream(body: AsyncIterable<Uint8Array>, translation: Translation): AsyncIterable<Uint8Array> {
  const converter = translation.stream();
  for await (const chunk of body) yield* converter.push(chunk);
  yield* converter.end();
}
