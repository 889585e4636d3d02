/**
 * A client that reads a long stream slowly holds its upstream back: the relay writes each read
 * straight into the client's response and, when the socket cannot take more, stops reading
 * the upstream until it drains. Nothing piles up in the gateway, and once the client reads on,
 * the whole answer arrives byte for byte and is billed by its usage.
 */
import { once } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chatCost } from '../helpers/billing.js';
import { ACCOUNT, MODEL, eventually, postChatRaw, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

/** 40,000 events of about 1 KB: far more than every socket buffer on the way can hold. */
const EVENTS = 40_000;
const TEXT = 'x'.repeat(1000);

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
/** Bytes the upstream has handed to its socket so far. */
let written = 0;

beforeEach(async () => {
  written = 0;
  up = await startTestUpstream();
  up.setBehavior({
    kind: 'custom',
    async handle(_req, res) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const send = async (data: string) => {
        const frame = `data: ${data}\n\n`;
        written += Buffer.byteLength(frame);
        if (!res.write(frame)) await once(res, 'drain');
      };
      const chunk = (delta: Record<string, unknown>, finish: string | null) =>
        JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] });
      for (let i = 0; i < EVENTS && !res.destroyed; i++) await send(chunk({ content: TEXT }, null));
      await send(chunk({}, 'stop'));
      await send(JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 11, completion_tokens: EVENTS } }));
      await send('[DONE]');
      res.end();
    },
  });
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 1000 });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterEach(async () => {
  await gw.close();
  await up.close();
});

describe('a slow client', () => {
  it('holds the upstream back while it does not read, then gets the whole answer, billed by its usage', async () => {
    const res = await postChatRaw(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'Write at length.' }], stream: true });
    expect(res.statusCode).toBe(200);
    res.pause();

    // Not read by the client: the upstream stops once the buffers on the way are full.
    await eventually(() => written > 0, 'the upstream starts writing');
    // Held: no byte more over three looks in a row, 150 ms apart.
    let before = -1;
    let quiet = 0;
    await eventually(
      async () => {
        const now = written;
        quiet = now === before ? quiet + 1 : 0;
        before = now;
        await new Promise((r) => setTimeout(r, 150));
        return quiet >= 3;
      },
      'the upstream is held back',
      15_000,
    );
    const total = EVENTS * (TEXT.length + 120);
    expect(written).toBeLessThan(total / 2);

    // Read on: every event arrives, then [DONE], and the charge is the usage's.
    const parts: Buffer[] = [];
    res.on('data', (b: Buffer) => parts.push(b));
    res.resume();
    await once(res, 'end');
    const text = Buffer.concat(parts).toString('utf8');
    expect(text.split(TEXT).length - 1).toBe(EVENTS);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const charges = (await gw.gateway.admin.ledger(ACCOUNT)).filter((e) => e.units.kind !== 'credit');
    expect(charges).toHaveLength(1);
    expect(charges[0]?.cost).toBe(chatCost(11, EVENTS));
  }, 60_000);
});
