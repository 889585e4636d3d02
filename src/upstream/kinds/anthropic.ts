/**
 * The Anthropic Messages API: the key goes in `x-api-key`, every call names the API version
 * (a configured `anthropic-version` header wins). Messages requests pass as they are; chat
 * completions are translated both ways, and Responses through chat.
 */
import { GatewayError } from '../../errors.js';
import { compose } from './compose.js';
import { chatOverMessages } from './messages/index.js';
import { responsesOverChat } from './responses-chat.js';
import type { Kind } from './types.js';

const responsesOverMessages = compose(responsesOverChat, chatOverMessages);

export const ANTHROPIC_VERSION = '2023-06-01';

export const anthropicKind: Kind = {
  auth: (apiKey): Record<string, string> => (apiKey ? { 'x-api-key': apiKey } : {}),
  headers: { 'anthropic-version': ANTHROPIC_VERSION },
  translation(path) {
    if (path === '/messages') return null;
    if (path === '/chat/completions') return chatOverMessages;
    if (path === '/responses') return responsesOverMessages;
    throw new GatewayError('invalid_request', `This model is served by an Anthropic upstream, which cannot answer /v1${path}; use /v1/chat/completions, /v1/responses or /v1/messages.`, {
      param: 'model',
    });
  },
};
