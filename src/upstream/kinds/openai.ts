/** The OpenAI HTTP API: the gateway's own wire, so OpenAI-shaped requests pass as they are; Anthropic Messages go as chat. */
import { messagesOverChat } from './messages/index.js';
import type { Kind } from './types.js';

export const openaiKind: Kind = {
  auth: (apiKey): Record<string, string> => (apiKey ? { authorization: `Bearer ${apiKey}` } : {}),
  translation: (path) => (path === '/messages' ? messagesOverChat : null),
};
