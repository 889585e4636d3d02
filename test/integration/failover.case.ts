/**
 * One failover, whatever the Redis shape (a Cluster master, a Sentinel primary): a gateway on
 * stores for it serves an account; two calls are in flight (holds placed, the upstream
 * holding them) when the primary serving the account is killed with SIGKILL. Until its
 * replica takes over every call answers 503 service_unavailable with Retry-After; within 20 s
 * calls succeed again; and the ledger holds exactly one entry per successful call (the
 * in-flight ones included, settled by the meter's retries), none for a refused one, with the
 * wallet down by exactly their cost.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import type { Stores } from '../../src/stores/types.js';
import { chatCost, chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, eventually, makeGateway, testConfig } from '../helpers/gateway.js';
import { command, type RedisProcess } from '../helpers/redis-servers.js';
import { startTestUpstream } from '../helpers/upstream.js';

export interface FailoverInput {
  /** Stores on the Redis under test, with this key prefix. */
  storage(keyPrefix: string): Stores;
  prefix: string;
  /** The process serving `key` as primary now (the one to kill). */
  primaryOf(key: string): Promise<RedisProcess>;
  /**
   * What befalls the primary (default: SIGKILL). `after` runs once calls succeed again (a
   * paused primary wakes), before the last calls and the count of the books.
   */
  fault?: (primary: RedisProcess) => Promise<{ after?: () => Promise<void> }>;
}

const killed = async (primary: RedisProcess): Promise<{ after?: () => Promise<void> }> => {
  await primary.kill();
  return {};
};

export async function failoverScenario(opts: FailoverInput): Promise<void> {
  const up = await startTestUpstream();
  const usage = { prompt_tokens: 5, completion_tokens: 7 };
  up.setBehavior({ kind: 'json', content: 'ok', usage });
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 10 });
  const { prefix } = opts;
  const stores = opts.storage(prefix);
  const { gateway } = await makeGateway({ ...setup.options, stores, logger: silentLogger });
  const call = async () => {
    const res = await gateway.fetch(
      new Request('http://gateway.test/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 50 }),
      }),
      { clientAddress: '198.51.100.7' },
    );
    const body = (await res.json()) as { error?: { code?: string } };
    return { status: res.status, requestId: res.headers.get('x-request-id')!, retryAfter: res.headers.get('retry-after'), code: body.error?.code };
  };
  const answers: Awaited<ReturnType<typeof call>>[] = [];
  try {
    const { balance: before } = await stores.billing.wallet(ACCOUNT);
    for (let i = 0; i < 3; i++) answers.push(await call());
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);

    // Two calls in flight (their holds placed, the upstream holding them) when the primary dies.
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    up.setBehavior({ kind: 'json', content: 'ok', usage, gate });
    const seen = up.requests.length;
    const inFlight = [call(), call()];
    await eventually(() => up.requests.length === seen + 2, 'two calls at the upstream', 10_000);

    // Everything written so far reached the replica, so what the test counts is what a
    // promoted replica holds (Redis replicates asynchronously; that window is not tested).
    const master = await opts.primaryOf(`${prefix}{a:${ACCOUNT}}:bal`);
    await eventually(async () => {
      const info = String(await command(master.port, 'INFO', 'replication'));
      const offset = /master_repl_offset:(\d+)/.exec(info)?.[1];
      return offset !== undefined && new RegExp(`slave0:.*offset=${offset},`).test(info);
    }, 'replica caught up', 10_000);

    const fault = await (opts.fault ?? killed)(master);
    const killedAt = Date.now();
    up.setBehavior({ kind: 'json', content: 'ok', usage });
    open();

    const during: Awaited<ReturnType<typeof call>>[] = [];
    for (;;) {
      const a = await call();
      during.push(a);
      if (a.status === 200) break;
      expect(Date.now() - killedAt, 'calls succeed again within 20 s').toBeLessThan(20_000);
      await sleep(200);
    }
    const recoveredMs = Date.now() - killedAt;
    const refused = during.filter((a) => a.status !== 200);
    expect(refused.length, 'the first calls after the kill are refused').toBeGreaterThan(0);
    for (const a of refused) {
      expect(a).toMatchObject({ status: 503, code: 'service_unavailable', retryAfter: '1' });
    }
    expect(recoveredMs).toBeLessThan(20_000);
    answers.push(...during, ...(await Promise.all(inFlight)));
    await fault.after?.();
    for (let i = 0; i < 3; i++) answers.push(await call());

    // Background settles of the in-flight calls retry until they land on the new primary.
    await eventually(async () => (await stores.billing.wallet(ACCOUNT)).held === 0n, 'every hold settled', 15_000);
    const succeeded = answers.filter((a) => a.status === 200);
    expect(succeeded.length).toBe(3 + 1 + 2 + 3);
    const ledger = await chargesOf(stores.billing.ledger(ACCOUNT));
    const ids = ledger.map((e) => e.id).sort();
    // Each successful call charged exactly once, no refused call charged at all.
    expect(ids).toEqual(succeeded.map((a) => a.requestId).sort());
    const each = chatCost(usage.prompt_tokens, usage.completion_tokens);
    for (const e of ledger) expect(e.cost).toBe(each);
    expect(await stores.billing.wallet(ACCOUNT)).toEqual({ balance: before - each * BigInt(succeeded.length), held: 0n });
    // The store reports healthy again once every node's view of the cluster has caught up
    // with the promotion (gossip can trail the first calls the new primary serves).
    await eventually(() => stores.ping!().then(() => true, () => false), 'the store to report healthy', 15_000);
    await expect(stores.ping!()).resolves.toBeUndefined();
  } finally {
    await gateway.dispose();
    await stores.close();
    await up.close();
  }
}
