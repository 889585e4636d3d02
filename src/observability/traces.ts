/**
 * Traces through @opentelemetry/api only: no SDK is bundled. When the host app registers a
 * tracer provider, each request is a span named after its operation, with the GenAI semantic
 * conventions (gen_ai.operation.name, gen_ai.request.model, gen_ai.usage.input_tokens,
 * gen_ai.usage.output_tokens, ...); the upstream call is a child span and its trace context
 * travels upstream (traceparent). Without a provider every span is a no-op.
 */
import { context, ProxyTracerProvider, propagation, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Observer } from './record.js';

const tracer = () => trace.getTracer('model-gateway');

/** GenAI operation names by route. */
const OPERATIONS: Record<string, string> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'text_completion',
  '/v1/embeddings': 'embeddings',
  '/v1/responses': 'chat',
  '/v1/messages': 'chat',
  '/v1/images/generations': 'image_generation',
  '/v1/audio/speech': 'speech',
  '/v1/videos': 'video_generation',
};

/**
 * Whether a tracer provider is registered. The API's global provider is a proxy that hands
 * out no-op spans until an SDK registers; with none, the gateway makes no spans at all (a
 * no-op span, its context and its attributes still cost allocations on every request).
 * Checked per request, so a provider registered after the gateway started is picked up.
 */
export function tracingActive(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegateTracer('model-gateway') !== undefined;
}

/** The request's span, started on arrival; null when no tracer provider is registered. */
export function startRequestSpan(method: string): Span | null {
  if (!tracingActive()) return null;
  return tracer().startSpan(`${method} model-gateway`, { kind: SpanKind.SERVER, attributes: { 'http.request.method': method } });
}

/** A child span of `parent` around an upstream call, and the headers that carry its context upstream. */
export function startUpstreamSpan(parent: Span | null, upstream: string, path: string, headers: Record<string, string>): Span {
  const ctx = parent ? trace.setSpan(context.active(), parent) : context.active();
  const span = tracer().startSpan(`upstream ${upstream} ${path}`, { kind: SpanKind.CLIENT, attributes: { 'server.address': upstream, 'url.path': path } }, ctx);
  propagation.inject(trace.setSpan(ctx, span), headers);
  return span;
}

/** Ends each request's span with what the request turned out to be. */
export const tracing: Observer = {
  end(r) {
    const span = r.span;
    if (!span) return;
    const operation = OPERATIONS[r.route];
    if (operation) {
      span.updateName(`${operation} ${r.model ?? ''}`.trim());
      span.setAttribute('gen_ai.operation.name', operation);
    } else {
      span.updateName(`${r.method} ${r.route}`);
    }
    span.setAttribute('http.route', r.route);
    span.setAttribute('http.response.status_code', r.status);
    span.setAttribute('model_gateway.request_id', r.requestId);
    if (r.model) span.setAttribute('gen_ai.request.model', r.model);
    if (r.upstream) span.setAttribute('gen_ai.system', r.upstream);
    if (r.promptTokens !== null) span.setAttribute('gen_ai.usage.input_tokens', r.promptTokens);
    if (r.completionTokens !== null) span.setAttribute('gen_ai.usage.output_tokens', r.completionTokens);
    if (r.costNano !== null) span.setAttribute('model_gateway.cost_usd', Number(r.costNano) / 1e9);
    if (r.keyId) span.setAttribute('model_gateway.key_id', r.keyId);
    if (r.limit) span.setAttribute('model_gateway.limit', r.limit);
    if (r.guardrails) span.setAttribute('model_gateway.guardrails', r.guardrails.map((g) => `${g.id}:${g.action}`));
    // A server span is in error for a 5xx, or an answer that failed after its 200 (a cut stream);
    // a 4xx is the client's mistake, not the server's (OpenTelemetry's HTTP conventions leave
    // its status unset), and says which in error.type.
    if (r.errorCode) span.setAttribute('error.type', r.errorCode);
    if (r.status >= 500 || (r.status < 400 && r.errorCode)) span.setStatus({ code: SpanStatusCode.ERROR, message: r.errorCode ?? String(r.status) });
    span.end();
  },
};
