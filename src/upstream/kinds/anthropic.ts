/**
 * The Anthropic Messages API: the key goes in `x-api-key`, every call names the API version
 * (a configured `anthropic-version` header wins). Messages requests pass as they are; chat
 * completions are translated both ways.
 */
import { GatewayError } from '../../errors.js';
import { chatOverMessages } from './messages/index.js';
import type { Kind } from './types.js';

export const ANTHROPIC_VERSION = '2023-06-01';

export const anthropicKind: Kind = {
  auth: (apiKey): Record<string, string> => (apiKey ? { 'x-api-key': apiKey } : {}),
  headers: { 'anthropic-version': ANTHROPIC_VERSION },
  translation(path) {
    if (path === '/messages') return null;
    if (path === '/chat/completions') return chatOverMessages;
    throw new GatewayError('invalid_request', `This model is served by an Anthropic upstream, which cannot answer /v1${path}; use /v1/chat/completions or /v1/messages.`, {
      param: 'model',
    });
  },
};
