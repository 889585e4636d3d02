/**
 * Two translations in a row: `first` carries an ingress API over chat completions, `second`
 * carries chat completions over a kind, so together they carry the ingress API over that kind
 * (Responses over Gemini is Responses -> chat -> Gemini). The request goes through `first`
 * then `second`; the answer, plain or streamed, comes back through `second` then `first`.
 */
import { GatewayError } from '../../errors.js';
import type { StreamTranslator, Translation } from './types.js';

export function compose(first: Translation, second: Translation): Translation {
  return {
    request(fields, stream) {
      const chat = first.request(fields, stream).body;
      try {
        return second.request(chat, stream);
      } catch (err) {
        throw inIngressTerms(err, first);
      }
    },
    answer: (body, request) => first.answer(second.answer(body), request),
    // The upstream speaks `second`'s kind: its answer is read (and billed) as that kind's.
    read: (body) => second.read(body),
    stream(request): StreamTranslator {
      const inner = second.stream();
      const outer = first.stream(request);
      const through = (frames: Uint8Array[]) => frames.flatMap((f) => outer.push(f));
      return {
        push: (chunk) => through(inner.push(chunk)),
        end: () => [...through(inner.end()), ...outer.end()],
        account: inner.account,
      };
    },
  };
}

/**
 * A refusal by the second translation, told in the client's terms: `second` names chat's
 * fields (`reasoning_effort`), the client sent the ingress API's (`reasoning.effort`).
 */
function inIngressTerms(err: unknown, first: Translation): unknown {
  const names = first.ingressNames;
  if (!(err instanceof GatewayError) || err.param === null || !names) return err;
  // A named field is named whole in the client's terms (`messages[3].tool_call_id` is `input`:
  // chat's message indexes are not the client's); any other keeps its path.
  const rename = (chatParam: string) => names[chatParam.match(/^[a-z_]+/)?.[0] ?? chatParam] ?? chatParam;
  const param = rename(err.param);
  if (param === err.param) return err;
  // Chat's field names in the message too: quoted ones, and bare snake_case ones (no ordinary
  // word has an underscore).
  const message = err.message
    .replace(/(['`])([A-Za-z0-9_.[\]]+)\1/g, (_, q: string, name: string) => `${q}${rename(name)}${q}`)
    .replace(/\b[a-z]+(?:_[a-z]+)+\b/g, (name) => rename(name));
  return new GatewayError(err.code, message, { status: err.status, type: err.type, param, metadata: err.metadata, headers: err.headers, cause: err });
}
