/** The Messages <-> chat translations, as the `Translation`s the kinds hand out. */
import { chatAnswer } from '../../answers/chat.js';
import { messagesAnswer } from '../../answers/messages.js';
import type { Translation } from '../types.js';
import { ChatToMessagesEvents } from './chat-to-events.js';
import { chatAnswerOf, messagesRequestOf } from './from-chat.js';
import { MessagesToChatEvents } from './events-to-chat.js';
import { chatRequestOf, messageOf } from './to-chat.js';

/** Anthropic Messages in, an OpenAI chat completions upstream out. */
export const messagesOverChat: Translation = {
  request: (fields, stream) => ({ path: '/chat/completions', body: chatRequestOf(fields, stream) }),
  answer: messageOf,
  read: chatAnswer,
  stream: () => new ChatToMessagesEvents(),
};

/** OpenAI chat completions in, an Anthropic Messages upstream out. */
export const chatOverMessages: Translation = {
  request: (fields, stream) => ({ path: '/messages', body: messagesRequestOf(fields, stream) }),
  answer: chatAnswerOf,
  read: messagesAnswer,
  stream: () => new MessagesToChatEvents(),
};
