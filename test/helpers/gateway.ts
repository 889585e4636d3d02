/**
 * Gateways for tests: a config pointing at a test upstream (one text model with known prices),
 * an account, a developer key and an agent key; and a real node:http server on 127.0.0.1.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, request, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/gateway.js';
import { silentLogger } from '../../src/observability/log.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import type { LedgerEntry } from '../../src/index.js';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A fresh key in the gateway's format: sk-mg- and 44 base62 characters. */
export function testKey(): string {
  let out = 'sk-mg-';
  for (const b of randomBytes(64)) {
    if (b < 248) out += BASE62[b % 62];
    if (out.length === 6 + 44) break;
  }
  return out;
}

export const MODEL = 'test/chat';
export const UPSTREAM_MODEL = 'provider-chat-1';
export const PROMPT_PRICE = '0.000001';
export const COMPLETION_PRICE = '0.000002';
// Random-looking, as real keys are: no run of 6 of its characters is an ordinary word, so
// removing key material from logs and errors leaves the gateway's own words alone.
export const UPSTREAM_API_KEY = 'sk-test-Zq8vW2xK9pL4mR7tJ3';
export const ACCOUNT = 'acct_test';

export interface TestSetup {
  options: GatewayOptions;
  /** Developer key of ACCOUNT. */
  devKey: string;
  /** Agent key of ACCOUNT, pinned to MODEL. */
  agentKey: string;
  account: string;
}

export interface ConfigInput {
  /** The test upstream's base URL (…/v1). Without it the model runs on the built-in simulator. */
  upstreamUrl?: string;
  walletUsd?: string | number;
  /** Upstream timeoutMs. Default 10000. */
  timeoutMs?: number;
  /** Extra models (they may name upstream "test"). */
  models?: NonNullable<GatewayOptions['models']>;
  /** Extra accounts and keys. */
  accounts?: NonNullable<GatewayOptions['accounts']>;
  keys?: NonNullable<GatewayOptions['keys']>;
  brands?: NonNullable<GatewayOptions['brands']>;
  documents?: NonNullable<GatewayOptions['documents']>;
  limits?: GatewayOptions['limits'];
  now?: () => number;
  /** Default 2000 in tests. */
  shutdownGraceMs?: number;
  /** maxOutputTokens of MODEL. Default 4096. */
  maxOutputTokens?: number;
}

/**
 * Options for createGateway: upstream "test" (the test upstream, or the simulator), model
 * MODEL (upstreamModel UPSTREAM_MODEL, prompt 0.000001 / completion 0.000002 USD per token),
 * account ACCOUNT with `walletUsd` (default 100), a developer and an agent key, limits raised.
 */
export function testConfig(input: ConfigInput = {}): TestSetup {
  const devKey = testKey();
  const agentKey = testKey();
  const upstream = input.upstreamUrl
    ? { baseUrl: input.upstreamUrl, apiKey: UPSTREAM_API_KEY, timeoutMs: input.timeoutMs ?? 10_000 }
    : { simulate: true as const, chunkDelayMs: 0, imageDelayMs: 0, videoDurationMs: 0 };
  const options: GatewayOptions = {
    serviceName: 'test-gateway',
    upstreams: { test: upstream },
    models: [
      {
        id: MODEL,
        type: 'text',
        name: 'Test Chat',
        ownedBy: 'Test Labs',
        upstream: 'test',
        upstreamModel: UPSTREAM_MODEL,
        pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE },
        contextLength: 32_000,
        maxOutputTokens: input.maxOutputTokens ?? 4096,
        created: 1_700_000_000,
      },
      ...(input.models ?? []),
    ],
    accounts: [{ id: ACCOUNT, walletUsd: input.walletUsd ?? 100 }, ...(input.accounts ?? [])],
    keys: [
      { key: devKey, account: ACCOUNT, kind: 'developer', label: 'test developer key' },
      { key: agentKey, account: ACCOUNT, kind: 'agent', model: MODEL, label: 'test agent key' },
      ...(input.keys ?? []),
    ],
    brands: input.brands ?? [],
    documents: input.documents ?? [],
    limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000, ...(input.limits ?? {}) },
    // Teardown disposes gateways whose tests left calls hanging on purpose: a short grace
    // keeps that quick. Shutdown tests set their own.
    shutdownGraceMs: input.shutdownGraceMs ?? 2_000,
    logger: silentLogger,
    ...(input.now ? { now: input.now } : {}),
  };
  return { options, devKey, agentKey, account: ACCOUNT };
}

export interface RunningGateway {
  gateway: Gateway;
  /** The gateway's stores (memory stores on the gateway's clock unless `options.stores` was given). */
  stores: Stores;
  /** http://127.0.0.1:PORT/v1 */
  baseURL: string;
  origin: string;
  server: Server;
  /** Requests the node:http server received. */
  requestCount(): number;
  close(): Promise<void>;
}

/** Creates the gateway (and its stores), waits for seeding. */
export async function makeGateway(options: GatewayOptions): Promise<{ gateway: Gateway; stores: Stores }> {
  const stores = options.stores ?? createMemoryStores(options.now ? { now: options.now } : {});
  const gateway = createGateway({ ...options, stores });
  await gateway.ready;
  return { gateway, stores };
}

/** Creates the gateway, waits for seeding, and serves it on node:http at 127.0.0.1. */
export async function startGateway(options: GatewayOptions): Promise<RunningGateway> {
  const { gateway, stores } = await makeGateway(options);
  const server = createServer(gateway);
  let count = 0;
  server.on('request', () => count++);
  const sockets = new Set<Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  return {
    gateway,
    stores,
    baseURL: `${origin}/v1`,
    origin,
    server,
    requestCount: () => count,
    async close() {
      const closing = new Promise<void>((r) => server.close(() => r()));
      for (const s of sockets) s.destroy();
      server.closeAllConnections();
      await closing;
      await gateway.dispose();
      await stores.close();
    },
  };
}

/** Polls `check` until it returns true (every 10 ms, up to `timeoutMs`); throws with `what` otherwise. */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** POST /chat/completions with fetch. */
export function postChat(baseURL: string, key: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  return fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...init,
  });
}

/**
 * POST /chat/completions with node:http, resolving with the answer's head: the test reads the
 * body itself, as slowly as it likes (fetch would buffer ahead of it).
 */
export async function postChatRaw(baseURL: string, key: string, body: unknown): Promise<IncomingMessage> {
  const text = JSON.stringify(body);
  const req = request(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
  });
  req.end(text);
  const [res] = (await once(req, 'response')) as [IncomingMessage];
  return res;
}

/** Splits an SSE body into its `data:` payloads (and comments are dropped). */
export function sseData(text: string): string[] {
  return text
    .split(/\n\n/)
    .map((block) =>
      block
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n'),
    )
    .filter((d) => d.length > 0);
}

/**
 * Runs `fn` against a gateway with `plugins`, over the upstream at `upstreamUrl` (the test
 * config's key and account), and closes it after.
 */
export async function withPluginGateway<T>(
  upstreamUrl: string,
  plugins: NonNullable<GatewayOptions['plugins']>,
  fn: (gw: RunningGateway, key: string, account: string) => Promise<T>,
  timeoutMs?: number,
): Promise<T> {
  const { options, devKey, account } = testConfig({ upstreamUrl, ...(timeoutMs ? { timeoutMs } : {}) });
  const gw = await startGateway({ ...options, plugins });
  try {
    return await fn(gw, devKey, account);
  } finally {
    await gw.close();
  }
}


/**
 * One call to `path` of a running gateway and the charge it landed (null: released), once the
 * account holds nothing: the whole answer read, or (`leave`) the client gone right after the
 * answer's first read.
 */
export async function chargedCall(
  gw: RunningGateway,
  key: string,
  path: string,
  body: Record<string, unknown>,
  opts: { leave?: boolean; account?: string } = {},
): Promise<{ status: number; charge: LedgerEntry | null; text: string }> {
  const abort = new AbortController();
  const res = await fetch(`${gw.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: abort.signal,
  });
  let text = '';
  if (opts.leave && res.status === 200) {
    const first = await res.body!.getReader().read();
    text = new TextDecoder().decode(first.value);
    abort.abort();
  } else text = await res.text().catch(() => '');
  const id = res.headers.get('x-request-id')!;
  const account = opts.account ?? ACCOUNT;
  let charge: LedgerEntry | null = null;
  await eventually(async () => {
    const [entries, holds] = await Promise.all([gw.gateway.admin.ledger(account), gw.stores.billing.openHolds(account)]);
    charge = entries.find((e) => e.id === id) ?? null;
    return holds === 0;
  }, 'the call to be settled or released');
  return { status: res.status, charge, text };
}
