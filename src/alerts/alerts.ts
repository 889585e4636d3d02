/**
 * Budget alerts: a plugin on `onBilled`. After each charge it compares the key's month-to-date
 * spend with its monthly cap (percent thresholds) and the account's wallet balance with
 * amounts (balance-below thresholds), and sends one signed webhook per crossing.
 *
 * Once per crossing, also across restarts and instances: a crossing is recorded in the store
 * (the idempotency store's atomic create-if-absent, scope "alert:..."), and only the caller
 * that creates the record sends the webhook. The record says "being delivered" until the
 * delivery is done with; one the gateway's stop cut short lapses, and the next charge past the
 * crossing sends it again (a receiver that got it before the cut may see it twice: a cap
 * alert under the same idempotency key, a balance alert naming the later charge). Cap crossings are named by their month, so they
 * re-arm when the month turns; a balance crossing re-arms when a later charge finds the
 * balance back at or above the threshold (after a top-up). With memory storage the records
 * live as long as the process.
 *
 * Delivery: POST of a JSON body; `x-mg-signature: t=<unix s>,v1=<hex HMAC-SHA256 of
 * "<t>.<body>" with the webhook secret>`, `x-mg-timestamp`, and `idempotency-key` (the
 * alert id, stable across retries). Network errors, 408, 429 and 5xx are retried with
 * exponential backoff up to `maxAttempts`; the gateway's dispose() stops retrying.
 */
import { createHmac } from 'node:crypto';
import type { Services } from '../services.js';
import { formatUsd, parseUsd } from '../billing/money.js';
import type { GatewayConfig } from '../options.js';
import type { GatewayPlugin } from '../pipeline/hooks.js';
import type { LedgerEntry } from '../stores/types.js';
import { pause } from '../upstream/sleep.js';

type AlertsConfig = NonNullable<GatewayConfig['alerts']>;
type Thresholds = AlertsConfig['defaults'];

/** Crossing records outlive any month (a cap crossing is named by its month anyway). */
const RECORD_TTL_MS = 40 * 24 * 60 * 60 * 1000;

export interface BudgetAlert {
  /** Stable per crossing: the receiver's idempotency key. */
  id: string;
  type: 'budget.key_monthly_cap' | 'budget.balance_below';
  created: number;
  account: string;
  key: string | null;
  /** A percent of the cap, or a USD amount. */
  threshold: number | string;
  month?: string;
  spentUsd?: string;
  capUsd?: string;
  balanceUsd?: string;
  /** The ledger entry whose charge crossed the threshold. */
  entry: string;
}

/** An alert and the scope its crossing is recorded under. */
interface Crossing {
  alert: BudgetAlert;
  scope: string;
}

/** The signature header of a body sent at `t` (unix seconds). */
export function signWebhook(secret: string, t: number, body: string): string {
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}

/**
 * How long a crossing stays marked "being delivered": the longest its delivery can take (every
 * attempt timing out, every backoff waited) and one attempt more. A delivery the gateway's stop
 * cut short leaves the mark to lapse: the next charge past the crossing then sends it again.
 */
function deliveryMs(webhook: AlertsConfig['webhook']): number {
  let backoffs = 0;
  for (let n = 1; n < webhook.maxAttempts; n++) backoffs += webhook.backoffMs * 2 ** (n - 1);
  return (webhook.maxAttempts + 1) * webhook.timeoutMs + backoffs;
}

/**
 * Marks the crossing as being delivered (by `id`); true for the one caller that marks it first,
 * or first again once a delivery cut short let its mark lapse.
 */
async function firstCrossing(core: Services, cfg: AlertsConfig, scope: string, id: string): Promise<boolean> {
  return (await core.stores.idempotency.begin(scope, id, deliveryMs(cfg.webhook))).state === 'started';
}

/**
 * Records the crossing as done with (delivered, refused for good, or out of attempts): it is
 * not sent again. Only while this delivery's mark still stands: a balance crossing re-armed
 * meanwhile (a top-up dropped the mark) stays re-armed.
 */
async function doneWith(core: Services, scope: string, id: string): Promise<void> {
  if (!(await core.stores.idempotency.renew(scope, id, RECORD_TTL_MS))) return;
  await core.stores.idempotency.complete(scope, id, { status: 200, headers: {}, body: '' }, RECORD_TTL_MS);
}


/** POSTs one signed alert; true when it is done with (delivered, or refused for good). */
async function attempt(core: Services, webhook: AlertsConfig['webhook'], alert: BudgetAlert, body: string): Promise<boolean> {
  const t = Math.floor(core.now() / 1000);
  try {
    const res = await fetch(webhook.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': alert.id,
        'x-mg-timestamp': String(t),
        'x-mg-signature': signWebhook(webhook.secret, t, body),
      },
      body,
      signal: AbortSignal.any([AbortSignal.timeout(webhook.timeoutMs), core.shutdown]),
    });
    await res.arrayBuffer().catch(() => undefined);
    if (res.ok) return true;
    if (res.status < 500 && res.status !== 408 && res.status !== 429) {
      core.log.warn({ msg: 'budget alert refused by the webhook; not retried', alert: alert.id, status: res.status });
      return true;
    }
  } catch {
    // A network error or timeout: retried.
  }
  return false;
}

async function deliver(core: Services, webhook: AlertsConfig['webhook'], { alert, scope }: Crossing): Promise<void> {
  const { maxAttempts, backoffMs } = webhook;
  const body = JSON.stringify(alert);
  for (let n = 1; n <= maxAttempts && !core.shutdown.aborted; n++) {
    if (await attempt(core, webhook, alert, body)) return doneWith(core, scope, alert.id);
    // Cut short when the gateway shuts down; the wait's listener goes with it (a retry per
    // alert would otherwise leave one on the gateway's signal for good).
    if (n < maxAttempts) await pause(backoffMs * 2 ** (n - 1), core.shutdown);
  }
  if (core.shutdown.aborted) {
    // Its mark lapses: the next charge past the crossing (here or on another instance) sends it again.
    core.log.warn({ msg: 'budget alert delivery cut by the stop; sent again by a later charge', alert: alert.id });
    return;
  }
  core.log.warn({ msg: 'budget alert not delivered', alert: alert.id });
  await doneWith(core, scope, alert.id);
}

/** The key's monthly-cap percents that this entry's charge crossed first. */
async function capCrossings(core: Services, cfg: AlertsConfig, entry: LedgerEntry, month: string, capPercent: NonNullable<Thresholds['capPercent']>): Promise<Crossing[]> {
  const found: Crossing[] = [];
  const key = await core.stores.keys.get(entry.keyId);
  if (!key?.monthlyCap) return found;
  const spent = (await core.stores.billing.keyUsage(entry.accountId, entry.keyId, month)).monthly;
  for (const pct of capPercent) {
    // spent >= cap * pct / 100, exactly (percents may have decimals: scaled by 1000).
    if (spent * 100_000n < key.monthlyCap * BigInt(Math.round(pct * 1000))) continue;
    const scope = `alert:cap:${entry.accountId}:${entry.keyId}:${month}:${pct}`;
    const id = `alrt_${Buffer.from(scope).toString('base64url')}`;
    if (!(await firstCrossing(core, cfg, scope, id))) continue;
    const alert: BudgetAlert = {
      id,
      type: 'budget.key_monthly_cap',
      created: core.now(),
      account: entry.accountId,
      key: entry.keyId,
      threshold: pct,
      month,
      spentUsd: formatUsd(spent),
      capUsd: formatUsd(key.monthlyCap),
      entry: entry.id,
    };
    found.push({ alert, scope });
  }
  return found;
}

/** The balance-below amounts that this entry's charge crossed first; re-arms those back above. */
async function balanceCrossings(core: Services, cfg: AlertsConfig, entry: LedgerEntry, below: NonNullable<Thresholds['balanceBelowUsd']>): Promise<Crossing[]> {
  const found: Crossing[] = [];
  const balance = (await core.stores.billing.wallet(entry.accountId)).balance;
  for (const amount of below) {
    const limit = parseUsd(amount);
    const scope = `alert:balance:${entry.accountId}:${formatUsd(limit)}`;
    if (balance >= limit) {
      // Back above (a top-up): the next fall below is a new crossing.
      await core.stores.idempotency.abandon(scope);
      continue;
    }
    const id = `alrt_${Buffer.from(`${scope}:${entry.id}`).toString('base64url')}`;
    if (!(await firstCrossing(core, cfg, scope, id))) continue;
    const alert: BudgetAlert = {
      id,
      type: 'budget.balance_below',
      created: core.now(),
      account: entry.accountId,
      key: null,
      threshold: formatUsd(limit),
      balanceUsd: formatUsd(balance),
      entry: entry.id,
    };
    found.push({ alert, scope });
  }
  return found;
}

async function check(cfg: AlertsConfig, core: Services, entry: LedgerEntry): Promise<void> {
  const t = cfg.accounts[entry.accountId] ?? cfg.defaults;
  const found: Crossing[] = [];
  const month = new Date(entry.at).toISOString().slice(0, 7);
  const capPercent = cfg.keys[entry.keyId]?.capPercent ?? t.capPercent ?? [];
  if (capPercent.length > 0) found.push(...(await capCrossings(core, cfg, entry, month, capPercent)));
  const below = t.balanceBelowUsd ?? [];
  if (below.length > 0) found.push(...(await balanceCrossings(core, cfg, entry, below)));
  for (const crossing of found) core.track(deliver(core, cfg.webhook, crossing));
}

export function budgetAlerts(cfg: AlertsConfig, getCore: () => Services): GatewayPlugin {
  return {
    name: 'budget-alerts',
    onBilled({ entry }) {
      // Not awaited by the settle: the checks and deliveries run in the background.
      const core = getCore();
      core.track(check(cfg, core, entry).catch((err: unknown) => core.log.error({ msg: 'budget alert check failed', err: String(err) })));
    },
  };
}
