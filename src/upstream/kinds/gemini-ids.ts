/**
 * Tool call ids for Gemini's function calls, which come without one. An id is derived from
 * the answer's `responseId`, the candidate and the call's place in it, so the same answer
 * names its calls the same way plain and streamed. A thinking model signs its calls
 * (`thoughtSignature`) and must get the signature back with the call in the next turn; chat
 * clients send back only the call's id, so the signature travels inside it (base64url, after
 * `_sig_`), and is read out of it again when the call comes back.
 */
import { createHash, randomUUID } from 'node:crypto';

const SIGNED = /^call_[0-9a-f]{24}_sig_([A-Za-z0-9_-]+)$/;

/** What a response's call ids are derived from: its `responseId`, or a fresh value when it has none. */
export function idBase(responseId: unknown): string {
  return typeof responseId === 'string' && responseId ? responseId : randomUUID();
}

/** The id of call `n` (0-based) of candidate `candidate`, carrying its signature when it has one. */
export function toolCallId(base: string, candidate: number, n: number, signature: unknown): string {
  const id = `call_${createHash('sha256').update(`${base}:${candidate}:${n}`).digest('hex').slice(0, 24)}`;
  if (typeof signature !== 'string' || !signature) return id;
  return `${id}_sig_${signature.replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '')}`;
}

/** The signature a call id carries (standard base64, as Gemini sent it), or null. */
export function toolCallSignature(id: string): string | null {
  const m = SIGNED.exec(id);
  if (!m) return null;
  const b64 = m[1]!.replaceAll('-', '+').replaceAll('_', '/');
  return b64 + '='.repeat((4 - (b64.length % 4)) % 4);
}
