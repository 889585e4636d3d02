/**
 * Upstream kinds: the wire API an upstream speaks. Requests come in on one API (chat
 * completions, Responses, Anthropic Messages) and go out in the kind of the upstream that
 * serves the model; a `Translation` carries one ingress API over one kind, both ways.
 */

import type { AnswerAccount } from '../../billing/answer.js';

export type UpstreamKind = 'openai' | 'anthropic' | 'gemini';

/** A converter of an upstream's streamed bytes into the ingress API's SSE bytes. */
export interface StreamTranslator {
  /** The ingress frames for one upstream read (possibly none). Throws a GatewayError on an error event. */
  push(chunk: Uint8Array): Uint8Array[];
  /** The ingress frames of what the upstream left when its body ended. */
  end(): Uint8Array[];
  /**
   * The answer as the upstream's own format says it, read as it is translated: what the
   * stream is billed by. Absent on a translator whose input is another translator's output.
   */
  readonly account?: AnswerAccount;
}

/** How one ingress API is carried by an upstream of another kind, and its answer brought back. */
export interface Translation {
  /**
   * The upstream call for the ingress request's fields (already naming the served model in
   * `model`): its path below the upstream's base URL and its JSON body. Throws a GatewayError
   * (400, `param` naming the field) for what the kind cannot carry: never dropped silently.
   */
  request(fields: Record<string, unknown>, stream: boolean): { path: string; body: Record<string, unknown> };
  /**
   * The ingress API's plain answer for the kind's plain answer. Throws when it is not one.
   * `request`: the client's fields, for an answer that echoes them (a Response's `tools`).
   */
  answer(body: Record<string, unknown>, request?: Record<string, unknown>): Record<string, unknown>;
  /** The kind's plain answer read into the answer model, by the reader of the kind's own format. */
  read(body: Record<string, unknown>): AnswerAccount;
  /** A fresh converter for one streamed answer (`request` as for `answer`). */
  stream(request?: Record<string, unknown>): StreamTranslator;
  /**
   * A translation to chat completions: the ingress field each chat field (by its top-level
   * name) came from, so that a refusal by the translation after it (chat -> the upstream's
   * kind) names what the client sent. A chat field not named keeps its name. Absent: chat's
   * names are the client's.
   */
  ingressNames?: Readonly<Record<string, string>>;
}

/** One kind: how it authenticates, and which ingress APIs it can carry. */
export interface Kind {
  /** The headers that authenticate a call with the upstream's key (none without a key). */
  auth(apiKey: string): Record<string, string>;
  /** Headers every call to the kind carries (an API version); an upstream's configured headers win. */
  headers?: Record<string, string>;
  /**
   * The translation for an ingress path (`/chat/completions`, `/responses`, `/messages`), or
   * null when the ingress API passes to this kind as it is. Throws a GatewayError when the
   * kind cannot serve that API at all.
   */
  translation(path: string): Translation | null;
}
