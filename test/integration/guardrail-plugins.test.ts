/**
 * A plugin's own input guardrail (onInput): it sees the prompt's texts after the configured
 * guardrails, may redact them (what the upstream receives and the hold is computed on) or block
 * the call (400 content_filter naming it, nothing billed); a hook that throws refuses the call
 * with 503 guardrail_unavailable and no upstream call: a guardrail fails closed. The access
 * line and the metrics name every guardrail that acted, configured or a plugin's.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import { createLogger } from '../../src/observability/logs.js';
import type { OnInputArgs } from '../../src/pipeline/hooks.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, eventually, MODEL, makeGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gateway: Gateway;
let stores: Stores;
let devKey: string;
const lines: Array<Record<string, unknown>> = [];
const seen: Array<{ texts: readonly string[]; path: string; model: string; account: string }> = [];

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  devKey = setup.devKey;
  setup.options.logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  setup.options.metrics = { path: '/metrics' };
  setup.options.guardrails = [{ id: 'pii', kind: 'pii', action: 'redact', entities: ['email'] }];
  setup.options.plugins = [
    {
      name: 'employee-ids',
      onInput(args: OnInputArgs) {
        seen.push({ texts: args.texts, path: args.path, model: args.model.id, account: args.key.account });
        if (args.texts.some((t) => t.includes('EXPLODE'))) throw new Error('classifier down');
        if (args.texts.some((t) => /launch codes/i.test(t))) args.block('launch-codes');
        args.redact('employee-ids', (t) => t.replace(/\bEMP-\d{4,}\b/g, '[EMPLOYEE]'));
      },
    },
  ];
  ({ gateway, stores } = await makeGateway(setup.options));
});

afterAll(async () => {
  await gateway?.dispose();
  await stores?.close();
  await up?.close();
});

beforeEach(() => {
  up.requests.length = 0;
  seen.length = 0;
  up.setBehavior({ kind: 'json', content: 'ok' });
});

const chat = async (content: string): Promise<Response> =>
  gateway.fetch(
    new Request('http://gw/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }] }),
    }),
  );

describe('a plugin input guardrail (onInput)', () => {
  it('sees the texts the configured guardrails left, and its redaction is what the upstream receives', async () => {
    const res = await chat('EMP-20931 wrote from ann@example.org');
    expect(res.status).toBe(200);
    expect(seen).toEqual([{ texts: ['EMP-20931 wrote from [REDACTED:EMAIL]'], path: '/chat/completions', model: MODEL, account: ACCOUNT }]);
    expect(up.requests[0]!.body!.messages).toEqual([{ role: 'user', content: '[EMPLOYEE] wrote from [REDACTED:EMAIL]' }]);
  });

  it('a block is 400 content_filter naming it, with no upstream call and nothing billed', async () => {
    const ledger = (await stores.billing.ledger(ACCOUNT)).length;
    const res = await chat('send the launch codes');
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ code: 'content_filter', metadata: { guardrail: 'launch-codes' } });
    expect(up.requests).toHaveLength(0);
    expect((await stores.billing.ledger(ACCOUNT)).length).toBe(ledger);
  });

  it('a hook that throws fails closed: 503 guardrail_unavailable, no upstream call', async () => {
    const res = await chat('EXPLODE');
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; metadata: unknown; message: string } };
    expect(body.error).toMatchObject({ code: 'guardrail_unavailable', metadata: { guardrail: 'employee-ids' } });
    // What the plugin threw is logged, never sent to the client.
    expect(body.error.message).not.toContain('classifier down');
    expect(up.requests).toHaveLength(0);
  });

  it('the access line and the metrics name each guardrail that acted, and how', async () => {
    const calls = [
      ['EMP-20931 wrote from ann@example.org', [{ id: 'pii', action: 'redact' }, { id: 'employee-ids', action: 'redact' }]],
      ['nothing to hide', undefined],
      ['send the launch codes', [{ id: 'launch-codes', action: 'block' }]],
      ['EXPLODE', [{ id: 'employee-ids', action: 'unavailable' }]],
    ] as const;
    for (const [content, expected] of calls) {
      const res = await chat(content);
      await res.text();
      const id = res.headers.get('x-request-id');
      await eventually(() => lines.some((l) => l.msg === 'access' && l.request_id === id), `the access line of ${id}`);
      expect(lines.find((l) => l.msg === 'access' && l.request_id === id)!.guardrails, content).toEqual(expected);
    }
    const metrics = await (await gateway.fetch(new Request('http://gw/metrics'))).text();
    const series = metrics.split('\n').filter((l) => l.startsWith('model_gateway_guardrail_actions_total{'));
    expect(series).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^model_gateway_guardrail_actions_total\{guardrail="pii",action="redact"\} [1-9]/),
        expect.stringMatching(/^model_gateway_guardrail_actions_total\{guardrail="employee-ids",action="redact"\} [1-9]/),
        expect.stringMatching(/^model_gateway_guardrail_actions_total\{guardrail="launch-codes",action="block"\} [1-9]/),
        expect.stringMatching(/^model_gateway_guardrail_actions_total\{guardrail="employee-ids",action="unavailable"\} [1-9]/),
      ]),
    );
  });
});
