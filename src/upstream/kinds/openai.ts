/** The OpenAI HTTP API: the gateway's own wire, so OpenAI-shaped requests pass as they are. */
import type { Kind } from './types.js';

export const openaiKind: Kind = {
  auth: (apiKey): Record<string, string> => (apiKey ? { authorization: `Bearer ${apiKey}` } : {}),
  translation: () => null,
};
