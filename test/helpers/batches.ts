/** A chat batch made through the official SDK: one line per custom id (its content the id), uploaded and created. */
import type OpenAI from 'openai';
import { toFile } from 'openai';

export async function createChatBatch(openai: OpenAI, model: string, customIds: string[]): Promise<{ input: OpenAI.FileObject; batch: OpenAI.Batch }> {
  const lines = customIds.map((id) =>
    JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model, max_tokens: 20, messages: [{ role: 'user', content: id }] } }),
  );
  const input = await openai.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
  const batch = await openai.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  return { input, batch };
}
