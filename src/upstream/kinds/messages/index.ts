/** The Messages <-> chat translations, as the `Translation`s the kinds hand out. */
import { chatAnswer } from '../../answers/chat.js';
import { messagesAnswer } from '../../answers/messages.js';
import type { Translation } from '../types.js';
import { ChatToMessagesEvents } from './chat-to-events.js';
import { chatAnswerOf, messagesRequestOf } from './from-chat.js';
import { MessagesToChatEvents } from './events-to-chat.js';
import { chatRequestOf, messageOf } from './to-chat.js';

/**
 * Chat fields that come from a Messages field of another name. The system prompt and split
 * tool results shift chat's message indexes from the client's.
 */
const MESSAGES_FIELD: Record<string, string> = {
  messages: 'messages',
  max_completion_tokens: 'max_tokens',
  reasoning_effort: 'thinking',
  stop: 'stop_sequences',
  user: 'metadata.user_id',
};

/** Anthropic Messages in, an OpenAI chat completions upstream out. */
export const messagesOverChat: Translation = {
  request: (fields, stream) => ({ path: '/chat/completions', body: chatRequestOf(fields, stream) }),
  answer: messageOf,
  read: chatAnswer,
  stream: () => new ChatToMessagesEvents(),
  ingressNames: MESSAGES_FIELD,
};


/** OpenAI chat completions in, an Anthropic Messages upstream out. */
export const chatOverMessages: Translation = {
  request: (fields, stream) => ({ path: '/messages', body: messagesRequestOf(fields, stream) }),
  answer: chatAnswerOf,
  read: messagesAnswer,
  stream: () => new MessagesToChatEvents(),
};
