/**
 * A graceful stop with batch lines in flight: the lines get the grace period, then are cut,
 * so the stop is not held up by an upstream that does not answer. A cut line settles nothing
 * (its hold stays open) and is not recorded: the instance that adopts the batch runs it again
 * and bills it then, once.
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { closedAfterAll, createChatBatch } from '../helpers/batches.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream } from '../helpers/upstream.js';

const keep = closedAfterAll();

/**
 * An upstream whose answers hang until `answer()`, and a first instance with a batch of `ids`
 * whose first two lines are in flight there (two at a time). `tweak` adds to its options.
 */
async function linesInFlight(ids: string[], timing: { inFlightLeaseTtlMs: number; shutdownGraceMs: number }, tweak?: (setup: ReturnType<typeof testConfig>) => void) {
  const up = keep(await startTestUpstream());
  let answering = false;
  up.setBehavior(() => (answering ? { kind: 'json', usage: { prompt_tokens: 11, completion_tokens: 7 } } : { kind: 'hang' }));
  const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 2, inFlightLeaseTtlMs: timing.inFlightLeaseTtlMs }, shutdownGraceMs: timing.shutdownGraceMs });
  tweak?.(setup);
  const first = await startGateway(setup.options);
  const stores = first.stores;
  const balance = (await stores.billing.wallet(ACCOUNT)).balance;
  const openai = new OpenAI({ apiKey: setup.devKey, baseURL: first.baseURL, maxRetries: 0 });
  const { batch } = await createChatBatch(openai, MODEL, ids);
  await up.waitForRequests(2);
  return { up, setup, first, stores, balance, batch, answer: () => void (answering = true) };
}

/** Waits until `gateway` (a next instance on the same books) has completed the batch; its view of it. */
async function completedBy(gateway: RunningGateway, devKey: string, batchId: string) {
  const b = new OpenAI({ apiKey: devKey, baseURL: gateway.baseURL, maxRetries: 0 });
  await eventually(async () => (await b.batches.retrieve(batchId)).status === 'completed', 'completed by the second instance', 10_000);
  return b.batches.retrieve(batchId);
}

describe('a batch line in flight when its instance stops', () => {
  it('is cut after the grace period, left open, and run and billed once by the next instance', async () => {
    // The first instance's lines never get an answer; the next instance's do.
    const { up, setup, first, stores, balance, batch, answer } = await linesInFlight(['s1', 's2', 's3'], { inFlightLeaseTtlMs: 300, shutdownGraceMs: 200 });
    // The stop ends within its grace periods, not when the upstream gives up.
    const stopped = await Promise.race([first.close().then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 10_000))]);
    expect(stopped).toBe(true);
    expect(await stores.batches.lines(ACCOUNT, batch.id)).toEqual([]);
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(3);

    answer();
    const second = keep(await startGateway({ ...setup.options, stores }));
    expect((await completedBy(second, setup.devKey, batch.id)).request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    // The two cut lines went upstream twice; every line is charged once, at one price.
    expect(up.requests).toHaveLength(5);
    const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges.map((e) => e.id).sort()).toEqual(['s1', 's2', 's3'].map((id) => `${batch.id}:${id}`));
    expect(new Set(charges.map((e) => e.cost)).size).toBe(1);
    expect(charges[0]!.cost).toBeGreaterThan(0n);
    const wallet = await stores.billing.wallet(ACCOUNT);
    expect(wallet).toEqual({ balance: balance - 3n * charges[0]!.cost, held: 0n });
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 40_000);

  it('is billed by the next instance at the price it was held at, though the model costs more there', async () => {
    const { setup, first, stores, batch, answer } = await linesInFlight(['p1', 'p2'], { inFlightLeaseTtlMs: 300, shutdownGraceMs: 200 });
    await first.close();

    // The next instance lists the model at ten times the price.
    answer();
    const dearer = setup.options.models!.map((m) => (m.id === MODEL ? { ...m, pricing: { prompt: '0.00001', completion: '0.00002' } } : m));
    await completedBy(keep(await startGateway({ ...setup.options, models: dearer, stores })), setup.devKey, batch.id);
    const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    // 11 prompt tokens at 0.000001 and 7 completion tokens at 0.000002 USD: 25,000 nano-USD each.
    expect(charges.map((e) => e.cost)).toEqual([25_000n, 25_000n]);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 40_000);

  it('bills each moderation check a cut line made: its run again is checked again, and that check is its own charge', async () => {
    const mod = keep(await startTestUpstream());
    mod.setBehavior({
      kind: 'custom',
      handle(_req, res, rec) {
        const input = (rec.body?.input as string[]) ?? [];
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'modr-1', results: input.map(() => ({ flagged: false })) }));
      },
    });
    const { setup, first, stores, balance, batch, answer } = await linesInFlight(['m1', 'm2', 'm3'], { inFlightLeaseTtlMs: 300, shutdownGraceMs: 200 }, ({ options }) => {
      options.upstreams = { ...options.upstreams, mod: { baseUrl: mod.url, apiKey: 'sk-moderation-key-0123456789', timeoutMs: 10_000 } };
      options.guardrails = [{ id: 'mod', kind: 'moderation', model: 'omni-moderation-latest', priceUsd: '0.0015', upstream: 'mod', on: ['input'] }];
    });
    await first.close();
    expect(mod.requests).toHaveLength(2);

    answer();
    await completedBy(keep(await startGateway({ ...setup.options, stores })), setup.devKey, batch.id);
    // The two cut lines were checked twice (a check's answer decides its run, so the run
    // again asks anew): five checks made, five charged; each line itself once.
    expect(mod.requests).toHaveLength(5);
    const entries = await chargesOf(stores.billing.ledger(ACCOUNT));
    const checks = entries.filter((e) => e.units.kind === 'guardrail');
    expect(checks).toHaveLength(5);
    expect(new Set(checks.map((e) => e.id)).size).toBe(5);
    const lines = entries.filter((e) => e.units.kind === 'tokens');
    expect(lines.map((e) => e.id).sort()).toEqual(['m1', 'm2', 'm3'].map((id) => `${batch.id}:${id}`));
    const spent = [...checks, ...lines].reduce((sum, e) => sum + e.cost, 0n);
    expect(await stores.billing.wallet(ACCOUNT)).toEqual({ balance: balance - spent, held: 0n });
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 40_000);

  it('keeps its claim on the batch through the grace period: no other instance runs its lines meanwhile', async () => {
    // A grace period four times the claim's lease: a claim that stopped being renewed at the
    // stop would lapse well within it, and one renewed to the end outlasts the stop's last steps.
    const { up, setup, first, stores, batch, answer } = await linesInFlight(['k1', 'k2', 'k3'], { inFlightLeaseTtlMs: 1_000, shutdownGraceMs: 4_000 });
    const closing = first.close();
    answer();
    const second = keep(await startGateway({ ...setup.options, stores }));
    await closing;
    // Until the first instance's lines were cut, the batch stayed its own.
    expect(up.requests).toHaveLength(2);
    await completedBy(second, setup.devKey, batch.id);
    expect(up.requests).toHaveLength(5);
    const charges = (await chargesOf(stores.billing.ledger(ACCOUNT))).filter((e) => e.id.startsWith(`${batch.id}:`));
    expect(charges).toHaveLength(3);
    expect((await auditBooks(stores, { account: ACCOUNT })).differences).toEqual([]);
  }, 40_000);

  // A stop gives everything in flight one grace period, at once: the calls of clients and the
  // batch lines alike. A batch that went on starting lines while the calls' grace ran (and only
  // then gave its lines a grace of their own) would double the stop, past what an orchestrator
  // waits before it kills the process mid-settle.
  const lineContent = (rec: { body?: Record<string, unknown> }) => (rec.body?.messages as { content?: unknown }[] | undefined)?.[0]?.content;
  /** The CLI's stop: no new connection, the calls in flight keep theirs through the grace. */
  const stopLikeTheCli = async (g: RunningGateway): Promise<void> => {
    g.server.close();
    await g.gateway.dispose();
    g.server.closeAllConnections();
    await g.stores.close();
  };

  it('starts no new line once the stop began, while a client call still has its grace', async () => {
    const up = await startTestUpstream();
    keep(up);
    // A client call that never gets its answer holds the stop for the whole grace; each line
    // takes 100 ms, so a batch still running would start a dozen more meanwhile.
    up.setBehavior((rec) =>
      lineContent(rec) === 'client' ? { kind: 'hang' } : { kind: 'json', gate: new Promise((r) => setTimeout(r, 100)) },
    );
    const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 1 }, shutdownGraceMs: 1_500 });
    const first = await startGateway(setup.options);
    const a = new OpenAI({ apiKey: setup.devKey, baseURL: first.baseURL, maxRetries: 0 });
    const ids = Array.from({ length: 60 }, (_, i) => `n${i}`);
    await createChatBatch(a, MODEL, ids);
    await up.waitForRequests(2);
    const client = a.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'client' }] }).catch(() => null);
    await eventually(() => up.requests.some((r) => lineContent(r) === 'client'), 'the client call upstream');
    const linesBefore = up.requests.filter((r) => lineContent(r) !== 'client').length;
    await stopLikeTheCli(first);
    await client;
    const linesAfter = up.requests.filter((r) => lineContent(r) !== 'client').length;
    // At most the line that was on its way upstream when the stop began.
    expect(linesAfter - linesBefore).toBeLessThanOrEqual(1);
    expect(linesAfter).toBeLessThan(ids.length);
  }, 40_000);

  it('ends within one grace period when both a client call and batch lines hang', async () => {
    const up = await startTestUpstream();
    keep(up);
    up.setBehavior({ kind: 'hang' });
    const graceMs = 1_500;
    const setup = testConfig({ upstreamUrl: up.url, limits: { batchConcurrency: 2 }, shutdownGraceMs: graceMs });
    const first = await startGateway(setup.options);
    const a = new OpenAI({ apiKey: setup.devKey, baseURL: first.baseURL, maxRetries: 0 });
    await createChatBatch(a, MODEL, ['h1', 'h2', 'h3']);
    await up.waitForRequests(2);
    const client = a.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'client' }] }).catch(() => null);
    await up.waitForRequests(3);
    const began = performance.now();
    await stopLikeTheCli(first);
    const took = performance.now() - began;
    await client;
    // One grace, then the cut and its settles: well short of a second grace.
    expect(took).toBeGreaterThanOrEqual(graceMs - 50);
    expect(took).toBeLessThan(2 * graceMs);
  }, 40_000);
});
