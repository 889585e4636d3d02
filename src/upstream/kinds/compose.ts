/**
 * Two translations in a row: `first` carries an ingress API over chat completions, `second`
 * carries chat completions over a kind, so together they carry the ingress API over that kind
 * (Responses over Gemini is Responses -> chat -> Gemini). The request goes through `first`
 * then `second`; the answer, plain or streamed, comes back through `second` then `first`.
 */
import type { StreamTranslator, Translation } from './types.js';

export function compose(first: Translation, second: Translation): Translation {
  return {
    request(fields, stream) {
      return second.request(first.request(fields, stream).body, stream);
    },
    answer: (body) => first.answer(second.answer(body)),
    // The upstream speaks `second`'s kind: its answer is read (and billed) as that kind's.
    read: (body) => second.read(body),
    stream(): StreamTranslator {
      const inner = second.stream();
      const outer = first.stream();
      const through = (frames: Uint8Array[]) => frames.flatMap((f) => outer.push(f));
      return {
        push: (chunk) => through(inner.push(chunk)),
        end: () => [...through(inner.end()), ...outer.end()],
        account: inner.account,
      };
    },
  };
}
