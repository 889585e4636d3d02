/**
 * An upstream's error text reaches clients and logs without key material: every run of 6 or
 * more characters of any configured upstream key is removed, whole or cut in pieces, in a
 * relayed 4xx, in a stream's error event, and in every log line; ordinary text is left as it
 * came.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/observability/log.js';
import { MODEL, makeGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const KEY = 'sk-upstream-SECRET-123456';
/** Another upstream's key: any configured key is hidden, not only the answering one's. */
const OTHER_KEY = 'ups-spare-9f8e7d6c5b4a39281706';
/** Pieces that must not appear anywhere (each >= 6 characters of a key). */
const PIECES = ['sk-upstream-S', 'ECRET-123456', KEY.slice(9, 15), OTHER_KEY.slice(4, 16)];

let up: TestUpstream;
beforeAll(async () => {
  up = await startTestUpstream();
});
afterAll(async () => {
  await up?.close();
});

async function gatewayWithLog() {
  const lines: string[] = [];
  const capture = (level: string) => (e: Record<string, unknown>) => void lines.push(`${level} ${JSON.stringify(e, (_k, v: unknown) => (v instanceof Error ? { message: v.message, stack: v.stack, cause: v.cause } : v))}`);
  const logger: Logger = { info: capture('info'), warn: capture('warn'), error: capture('error') };
  const setup = testConfig({ upstreamUrl: up.url });
  setup.options.upstreams = {
    test: { baseUrl: up.url, apiKey: KEY, timeoutMs: 10_000 },
    spare: { baseUrl: up.url, apiKey: OTHER_KEY, timeoutMs: 10_000 },
  };
  const { gateway, stores } = await makeGateway({ ...setup.options, logger });
  const chat = async (extra: Record<string, unknown> = {}) => {
    const res = await gateway.fetch(
      new Request('http://gw.test/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...extra }),
      }),
      { clientAddress: '198.51.100.40' },
    );
    return { status: res.status, text: await res.text() };
  };
  return { gateway, stores, chat, lines };
}

const expectClean = (where: string, text: string) => {
  for (const p of PIECES) expect(text, `${where} holds "${p}"`).not.toContain(p);
};

describe('upstream key material in error text', () => {
  it('a relayed 400 with the key cut in two, a key’s middle 6 characters, another upstream’s key: gone from the answer and the log', async () => {
    const { gateway, stores, chat, lines } = await gatewayWithLog();
    try {
      const messages = [
        'Incorrect API key provided: "sk-upstream-S|ECRET-123456".',
        `Key fragment ${KEY.slice(9, 15)} is not valid.`,
        `Key ${OTHER_KEY} belongs to another project.`,
      ];
      for (const message of messages) {
        up.setBehavior({ kind: 'error', status: 400, message });
        const r = await chat();
        expect(r.status).toBe(400);
        expectClean('answer', r.text);
        expect(JSON.parse(r.text).error.message).toContain('[redacted]');
      }
      // A 401 is not relayed, but its words are logged.
      up.setBehavior({ kind: 'error', status: 401, message: 'Incorrect API key provided: "sk-upstream-S|ECRET-123456".' });
      expect((await chat()).status).toBe(502);
      // Ordinary text is left as it came.
      up.setBehavior({ kind: 'error', status: 400, message: 'Invalid value for "temperature": must be at most 2.' });
      const plain = await chat();
      expect(JSON.parse(plain.text).error.message).toBe('Invalid value for "temperature": must be at most 2.');
      const logged = lines.join('\n');
      expect(logged).toContain('Incorrect API key provided');
      expect(logged).toContain('must be at most 2');
      expectClean('log', logged);
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });

  it('a stream’s error event with the key cut in two: the client’s error frame and the log hold no piece', async () => {
    const { gateway, stores, chat, lines } = await gatewayWithLog();
    try {
      up.setBehavior({
        kind: 'custom',
        handle(_req, res) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'Begun' }, finish_reason: null }] })}\n\n`);
          res.end(`data: ${JSON.stringify({ error: { message: 'auth failed for "sk-upstream-S|ECRET-123456"' } })}\n\n`);
        },
      });
      const r = await chat({ stream: true });
      expect(r.text).toContain('"finish_reason":"error"');
      expect(r.text).toContain('auth failed for');
      expectClean('stream', r.text);
      expectClean('log', lines.join('\n'));
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });
});
