/**
 * Google's Gemini API (`generateContent`, `streamGenerateContent?alt=sse`) as an upstream
 * kind: the key goes in `x-goog-api-key`; chat completions are translated to it and back
 * (gemini-request.ts, gemini-answer.ts), and Responses and Anthropic Messages through chat
 * (responses-chat.ts, messages/).
 */
import { GatewayError } from '../../errors.js';
import { compose } from './compose.js';
import { GeminiChatStream, geminiAnswer } from './gemini-answer.js';
import { geminiRequest } from './gemini-request.js';
import { geminiAnswerAccount } from '../answers/gemini.js';
import { messagesOverChat } from './messages/index.js';
import { responsesOverChat } from './responses-chat.js';
import type { Kind, Translation } from './types.js';

export const chatOverGemini: Translation = {
  request: geminiRequest,
  answer: geminiAnswer,
  read: geminiAnswerAccount,
  stream: () => new GeminiChatStream(),
};

const responsesOverGemini = compose(responsesOverChat, chatOverGemini);
const messagesOverGemini = compose(messagesOverChat, chatOverGemini);

export const geminiKind: Kind = {
  auth: (apiKey): Record<string, string> => (apiKey ? { 'x-goog-api-key': apiKey } : {}),
  translation(path) {
    if (path === '/chat/completions') return chatOverGemini;
    if (path === '/responses') return responsesOverGemini;
    if (path === '/messages') return messagesOverGemini;
    throw new GatewayError('invalid_request', `This model is served by a Gemini upstream, which cannot serve ${path}.`, { param: 'model' });
  },
};
