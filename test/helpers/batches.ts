/** Batches for tests: one made through the official SDK, a stored record built by hand, and what a batch test starts. */
import type OpenAI from 'openai';
import { toFile } from 'openai';
import { afterAll } from 'vitest';
import type { BatchRecord } from '../../src/stores/types.js';

/** A stored batch record of `accountId`, in progress, with `overrides` (ids the caller's to make unique). */
export function batchRecord(accountId: string, overrides: Partial<BatchRecord> = {}): BatchRecord {
  return {
    id: 'batch_test',
    accountId,
    keyId: 'key_test',
    endpoint: '/v1/chat/completions',
    inputFileId: 'file_test',
    completionWindow: '24h',
    status: 'in_progress',
    createdAt: 1_700_000_000,
    inProgressAt: 1_700_000_000,
    finalizingAt: null,
    completedAt: null,
    failedAt: null,
    expiredAt: null,
    cancellingAt: null,
    cancelledAt: null,
    expiresAt: 1_700_086_400,
    outputFileId: null,
    errorFileId: null,
    errors: null,
    requestCounts: { total: 2, completed: 0, failed: 0 },
    metadata: null,
    model: 'gpt-4o-mini',
    held: '0',
    upstream: null,
    upstreamBatchId: null,
    owner: 'instance-a',
    ownerUntil: 1_700_000_000_000,
    rev: 0,
    ...overrides,
  };
}

/** A chat batch made through the official SDK: one line per custom id (its content the id), uploaded and created. */

export async function createChatBatch(openai: OpenAI, model: string, customIds: string[]): Promise<{ input: OpenAI.FileObject; batch: OpenAI.Batch }> {
  const lines = customIds.map((id) =>
    JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model, max_tokens: 20, messages: [{ role: 'user', content: id }] } }),
  );
  const input = await openai.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
  const batch = await openai.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  return { input, batch };
}

/**
 * What a test file starts (gateways, upstreams) is closed after its last test, the last started
 * first: call at the top of the file, then pass each thing through the function it returns.
 */
export function closedAfterAll(): <T extends { close(): Promise<unknown> }>(started: T) => T {
  const running: Array<{ close(): Promise<unknown> }> = [];
  afterAll(async () => {
    for (const x of running.reverse()) await x.close();
  });
  return (started) => {
    running.push(started);
    return started;
  };
}
