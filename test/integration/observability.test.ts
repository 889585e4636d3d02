/**
 * Observability, read back after known calls: the Prometheus metrics scraped (with and without
 * their token), the access lines of a call, a refusal and an upstream failure, the spans a
 * registered tracer provider receives (GenAI attributes, the upstream call as a child span,
 * trace context sent upstream), and Server-Timing on the answers. No key appears in any of them.
 */
import { context, propagation, SpanStatusCode, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/observability/log.js';
import { createLogger } from '../../src/observability/logs.js';
import { formatUsd } from '../../src/billing/money.js';
import { chatCost } from '../helpers/billing.js';
import { eventually, MODEL, postChat, startGateway, testConfig, type RunningGateway, UPSTREAM_API_KEY } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const METRICS_TOKEN = 'scrape-token-0123456789';
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let account: string;
const lines: Array<Record<string, unknown>> = [];
const LEVELS: Record<number, string> = { 30: 'info', 40: 'warn', 50: 'error' };
// The default logger (pino, with the hand-serialised access line), writing into this array.
const capture: Logger = createLogger('info', {
  write(line: string) {
    const parsed = JSON.parse(line) as Record<string, unknown>;
    lines.push({ ...parsed, level: LEVELS[parsed.level as number] ?? parsed.level });
  },
});

beforeAll(async () => {
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 1 });
  devKey = setup.devKey;
  account = setup.account;
  gw = await startGateway({
    ...setup.options,
    // A model on an upstream nobody listens on: connect refused.
    upstreams: { ...setup.options.upstreams, dead: { baseUrl: 'http://127.0.0.1:1/v1', apiKey: 'sk-dead-Hc7qP2mX9vL4', timeoutMs: 2_000 } },
    models: [...(setup.options.models ?? []), { id: 'dead/chat', upstream: 'dead', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    metrics: { path: '/metrics', token: METRICS_TOKEN },
    logger: capture,
  });
});

afterAll(async () => {
  await gw.close();
  await up.close();
  trace.disable();
  propagation.disable();
  context.disable();
});

const access = () => lines.filter((l) => l.msg === 'access');

async function scrape(): Promise<string> {
  const res = await fetch(`${gw.origin}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  expect(res.status).toBe(200);
  return res.text();
}

/** The value of one sample line, e.g. metric('x_total{a="b"}'). */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('observability', () => {
  it('a billed call: access line, metrics, span with GenAI attributes, Server-Timing, traceparent upstream', async () => {
    up.setBehavior({ kind: 'json', content: 'hi', usage: { prompt_tokens: 10, completion_tokens: 5 } });
    const before = up.requests.length;
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'hello' }] });
    expect(res.status).toBe(200);
    expect(res.headers.get('server-timing')).toMatch(/^gateway;dur=\d+(\.\d)?, upstream;dur=\d+(\.\d)?$/);
    const requestId = res.headers.get('x-request-id');
    await eventually(() => access().some((l) => l.request_id === requestId), 'the access line');

    const line = access().find((l) => l.request_id === requestId)!;
    expect(line).toMatchObject({
      method: 'POST',
      route: '/v1/chat/completions',
      status: 200,
      account,
      model: MODEL,
      upstream: 'test',
      prompt_tokens: 10,
      completion_tokens: 5,
      cost_usd: formatUsd(chatCost(10, 5)),
    });
    expect(line.key_id).toMatch(/^key_/);
    expect(typeof line.ms).toBe('number');
    expect(typeof line.upstream_ms).toBe('number');

    // The upstream got the trace context of the gateway's upstream span.
    const traceparent = up.requests[before]!.headers.traceparent as string;
    expect(traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    const spans = exporter.getFinishedSpans();
    const server = spans.find((s) => s.attributes['model_gateway.request_id'] === requestId)!;
    expect(server.name).toBe(`chat ${MODEL}`);
    expect(server.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': MODEL,
      'gen_ai.usage.input_tokens': 10,
      'gen_ai.usage.output_tokens': 5,
      'http.response.status_code': 200,
    });
    const client = spans.find((s) => s.name === 'upstream test /chat/completions' && s.spanContext().traceId === server.spanContext().traceId)!;
    expect(client.parentSpanContext?.spanId).toBe(server.spanContext().spanId);
    expect(traceparent.split('-')[1]).toBe(client.spanContext().traceId);
    expect(traceparent.split('-')[2]).toBe(client.spanContext().spanId);

    const text = await scrape();
    expect(sample(text, 'model_gateway_requests_total{route="/v1/chat/completions",status="200",model="test/chat"}')).toBe(1);
    expect(sample(text, 'model_gateway_tokens_total{model="test/chat",direction="in"}')).toBe(10);
    expect(sample(text, 'model_gateway_tokens_total{model="test/chat",direction="out"}')).toBe(5);
    expect(sample(text, 'model_gateway_spend_usd_total{model="test/chat"}')).toBeCloseTo(Number(chatCost(10, 5)) / 1e9, 12);
    expect(sample(text, 'model_gateway_request_duration_seconds_count{route="/v1/chat/completions"}')).toBe(1);
    expect(sample(text, 'model_gateway_overhead_seconds_count{route="/v1/chat/completions"}')).toBe(1);
    expect(sample(text, 'model_gateway_open_holds')).toBe(0);
    expect(sample(text, 'model_gateway_open_streams')).toBe(0);
    expect(sample(text, 'model_gateway_circuit_open{upstream="test"}')).toBe(0);
    // The key's window hit rides on the hold: one store call for both.
    expect(text).toMatch(/model_gateway_store_call_seconds_count\{operation="billing\.hitAndPlaceHold"\} [1-9]/);
    expect(text).toMatch(/model_gateway_nodejs_eventloop_lag_seconds \d/);
  });

  it("Server-Timing: a plain answer's body time is the upstream's, not the gateway's", async () => {
    const answer = { id: 'chatcmpl-slow', object: 'chat.completion', created: 1, model: MODEL, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } };
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        // The headers now, the body 300 ms later.
        setTimeout(() => res.end(JSON.stringify(answer)), 300);
      },
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'slow body' }] });
    expect(res.status).toBe(200);
    const [, gateway, upstream] = /^gateway;dur=([\d.]+), upstream;dur=([\d.]+)$/.exec(res.headers.get('server-timing') ?? '')!.map(Number);
    expect(upstream).toBeGreaterThanOrEqual(290);
    expect(gateway).toBeLessThan(upstream!);
    up.setBehavior({ kind: 'json' });
  });

  it('a stream: time to first token, and the access line once the stream ended', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['a', 'b', 'c'], delayMs: 30, usageCounts: { prompt_tokens: 4, completion_tokens: 3 } });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'x' }] });
    const requestId = res.headers.get('x-request-id');
    await res.text();
    await eventually(() => access().some((l) => l.request_id === requestId), 'the stream access line');
    const line = access().find((l) => l.request_id === requestId)!;
    expect(line).toMatchObject({ status: 200, prompt_tokens: 4, completion_tokens: 3 });
    expect(line.ttfb_ms as number).toBeGreaterThan(0);
    expect(line.ms as number).toBeGreaterThanOrEqual(line.ttfb_ms as number);
    expect(sample(await scrape(), 'model_gateway_time_to_first_token_seconds_count{model="test/chat"}')).toBe(1);
  });

  it('a stream that fails after its 200: the access line says so (status 200, its error code)', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['one ', 'two ', 'three'], delayMs: 5, resetAfter: 2 });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'cut' }] });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('"finish_reason":"error"');
    const id = res.headers.get('x-request-id');
    await eventually(() => access().some((l) => l.request_id === id), 'the access line');
    expect(access().find((l) => l.request_id === id)).toMatchObject({ status: 200, error: 'upstream_error' });
    expect(lines.find((l) => l.msg === 'stream failed' && l.request_id === id)).toMatchObject({ upstream: 'test', code: 'upstream_error' });
    // Failed after its 200: the server's span is in error.
    const span = exporter.getFinishedSpans().find((s) => s.attributes['model_gateway.request_id'] === id)!;
    expect(span.status).toMatchObject({ code: SpanStatusCode.ERROR, message: 'upstream_error' });
  });

  it('a refusal: the access line names the limit, and the refusals counter counts it', async () => {
    // A 0.001 USD wallet cannot hold a call of up to 4,096 output tokens (0.008 USD).
    await gw.gateway.admin.createAccount({ id: 'acct_poor', walletUsd: '0.001' });
    const { key: poorKey } = await gw.gateway.admin.createKey({ account: 'acct_poor', kind: 'developer' });
    const res = await postChat(gw.baseURL, poorKey, { model: MODEL, messages: [{ role: 'user', content: 'a lot' }] });
    expect(res.status).toBe(402);
    const requestId = res.headers.get('x-request-id');
    await eventually(() => access().some((l) => l.request_id === requestId), 'the refusal access line');
    expect(access().find((l) => l.request_id === requestId)).toMatchObject({ status: 402, limit: 'wallet', error: 'insufficient_quota' });
    expect(sample(await scrape(), 'model_gateway_refusals_total{limit="wallet"}')).toBe(1);
    // A 4xx is the client's: its server span's status stays unset (OpenTelemetry's HTTP conventions), error.type says why.
    const span = exporter.getFinishedSpans().find((s) => s.attributes['model_gateway.request_id'] === requestId)!;
    expect(span.status.code).toBe(SpanStatusCode.UNSET);
    expect(span.attributes['error.type']).toBe('insufficient_quota');
  });

  it('a client that leaves before its answer: 499 client_closed in the access line, not a client mistake', async () => {
    up.setBehavior({ kind: 'hang' });
    const n = access().length;
    const ac = new AbortController();
    const call = postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'gone' }] }, { signal: ac.signal }).catch((e: unknown) => e);
    await up.waitForRequests(up.requests.length + 1);
    ac.abort();
    await call;
    await eventually(() => access().length > n, 'the access line');
    expect(access().slice(n)).toEqual([expect.objectContaining({ status: 499, error: 'client_closed' })]);
    up.setBehavior({ kind: 'json' });
  });

  it("the probes' and the metrics' refusals name their code in the access line, as the API's do", async () => {
    const asks: Array<[string, RequestInit, number, string]> = [
      ['/ready', { method: 'POST' }, 405, 'method_not_allowed'],
      ['/health', { method: 'DELETE' }, 405, 'method_not_allowed'],
      ['/metrics', { method: 'POST', headers: { authorization: `Bearer ${METRICS_TOKEN}` } }, 405, 'method_not_allowed'],
      ['/metrics', {}, 401, 'invalid_api_key'],
    ];
    for (const [path, init, status, code] of asks) {
      const res = await fetch(`${gw.origin}${path}`, init);
      expect(res.status, path).toBe(status);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe(code);
      const id = res.headers.get('x-request-id');
      await eventually(() => access().some((l) => l.request_id === id), 'the access line');
      expect(access().find((l) => l.request_id === id), `${init.method ?? 'GET'} ${path}`).toMatchObject({ status, error: code });
    }
  });

  it('an Idempotency-Key replay names its model and upstream in the access line, and charges nothing', async () => {
    up.setBehavior({ kind: 'json', content: 'once', usage: { prompt_tokens: 10, completion_tokens: 5 } });
    const key = `obs-replay-${Date.now()}`;
    const send = () =>
      fetch(`${gw.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'replay me' }] }),
      });
    const first = await send();
    expect(first.status).toBe(200);
    await first.text();
    const again = await send();
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    await again.text();
    const id = again.headers.get('x-request-id');
    await eventually(() => access().some((l) => l.request_id === id), 'the access line');
    const line = access().find((l) => l.request_id === id)!;
    expect(line).toMatchObject({ status: 200, model: MODEL, upstream: 'test' });
    expect(line.cost_usd ?? null).toBeNull();
  });

  it('a Messages call is a GenAI chat operation on its span', async () => {
    up.setBehavior({ kind: 'json', content: 'hi', usage: { prompt_tokens: 10, completion_tokens: 5 } });
    const res = await fetch(`${gw.baseURL}/messages`, {
      method: 'POST',
      headers: { 'x-api-key': devKey, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] }),
    });
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id');
    await eventually(() => exporter.getFinishedSpans().some((s) => s.attributes['model_gateway.request_id'] === requestId), 'the span');
    const span = exporter.getFinishedSpans().find((s) => s.attributes['model_gateway.request_id'] === requestId)!;
    expect(span.name).toBe(`chat ${MODEL}`);
    expect(span.attributes['gen_ai.operation.name']).toBe('chat');
  });

  it('a refusal names its model only when it is a listed one: made-up model names add no metrics series', async () => {
    await gw.gateway.admin.createAccount({ id: 'acct_lists', walletUsd: '1' });
    const { key: listed } = await gw.gateway.admin.createKey({ account: 'acct_lists', kind: 'developer', models: ['dead/chat'] });
    const { key: agent } = await gw.gateway.admin.createKey({ account: 'acct_lists', kind: 'agent', model: 'dead/chat' });
    const made = ['junk-a1b2c3', 'junk-d4e5f6', `junk-${'x'.repeat(3000)}`];
    for (const key of [listed, agent]) {
      for (const model of made) expect((await postChat(gw.baseURL, key, { model, messages: [{ role: 'user', content: 'x' }] })).status).toBe(403);
    }
    // A listed model the key may not call is still named.
    const before = sample(await scrape(), `model_gateway_requests_total{route="/v1/chat/completions",status="403",model="${MODEL}"}`) ?? 0;
    const refused = await postChat(gw.baseURL, listed, { model: MODEL, messages: [{ role: 'user', content: 'x' }] });
    expect(refused.status).toBe(403);
    const text = await scrape();
    expect(text).not.toContain('junk-');
    expect(sample(text, `model_gateway_requests_total{route="/v1/chat/completions",status="403",model="${MODEL}"}`)).toBe(before + 1);
    const id = refused.headers.get('x-request-id');
    await eventually(() => access().some((l) => l.request_id === id), 'the refusal access line');
    expect(access().find((l) => l.request_id === id)).toMatchObject({ status: 403, model: MODEL });
  });

  it('a wallet refusal (402) names the model it was for, in the access line and the counts', async () => {
    await gw.gateway.admin.createAccount({ id: 'acct_poor2', walletUsd: '0.001' });
    const { key } = await gw.gateway.admin.createKey({ account: 'acct_poor2', kind: 'developer' });
    const res = await postChat(gw.baseURL, key, { model: MODEL, messages: [{ role: 'user', content: 'a lot' }] });
    expect(res.status).toBe(402);
    const id = res.headers.get('x-request-id');
    await eventually(() => access().some((l) => l.request_id === id), 'the refusal access line');
    expect(access().find((l) => l.request_id === id)).toMatchObject({ status: 402, model: MODEL });
    expect(sample(await scrape(), `model_gateway_requests_total{route="/v1/chat/completions",status="402",model="${MODEL}"}`)).toBeGreaterThanOrEqual(1);
  });

  it('upstream failures: a warn line with the cause (connect refused; a status and its message), and a 502 access line', async () => {
    const refused = await postChat(gw.baseURL, devKey, { model: 'dead/chat', messages: [{ role: 'user', content: 'x' }] });
    expect(refused.status).toBe(502);
    const id1 = refused.headers.get('x-request-id');
    const warn1 = lines.find((l) => l.msg === 'upstream failure' && l.request_id === id1)!;
    expect(warn1).toMatchObject({ level: 'warn', upstream: 'dead', cause: 'connect_refused' });

    up.setBehavior({ kind: 'error', status: 500, message: `provider broke; key ${UPSTREAM_API_KEY} rejected` });
    const failed = await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'x' }] });
    expect(failed.status).toBe(502);
    const id2 = failed.headers.get('x-request-id');
    const warn2 = lines.find((l) => l.msg === 'upstream failure' && l.request_id === id2)!;
    expect(warn2).toMatchObject({ level: 'warn', upstream: 'test', cause: 'status 500', status: 500 });
    expect(String(warn2.error)).toContain('provider broke');
    expect(String(warn2.error)).not.toContain(UPSTREAM_API_KEY);
    await eventually(() => access().some((l) => l.request_id === id2), 'the failure access line');
    expect(access().find((l) => l.request_id === id2)).toMatchObject({ status: 502, error: 'upstream_error' });
  });

  it('the metrics need their token, and no key appears in logs, metrics or spans', async () => {
    expect((await fetch(`${gw.origin}/metrics`)).status).toBe(401);
    expect((await fetch(`${gw.origin}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    const everything = [
      JSON.stringify(lines),
      await scrape(),
      JSON.stringify(exporter.getFinishedSpans().map((s) => ({ name: s.name, attributes: s.attributes }))),
    ].join('\n');
    for (const secret of [devKey, UPSTREAM_API_KEY, 'dead-upstream-key-000', METRICS_TOKEN]) expect(everything).not.toContain(secret);
  });
});
