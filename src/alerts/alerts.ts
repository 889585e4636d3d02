/**
 * Budget alerts: a plugin on `onBilled` (and `onError`, below). After each charge it compares
 * the key's month-to-date spend with its monthly cap (percent thresholds) and the account's
 * wallet balance with amounts (balance-below thresholds), and sends one signed webhook per
 * crossing.
 *
 * Once per crossing, also across restarts and instances: a crossing is recorded in the store
 * (the idempotency store's atomic create-if-absent, scope "alert:..."), and only the caller
 * that creates the record sends the webhook. The record says "being delivered" for as long
 * as the attempt under way (and the wait before the next) may take, renewed as the delivery
 * goes on, and is kept once the delivery is done with. One a stop cut short is let go, and the
 * next charge past the crossing sends it again (a receiver that got it before the cut may see
 * it twice: a cap alert under the same idempotency key, a balance alert naming the later
 * charge). A key stopped by its cap, or a wallet too low for any call, makes no later charge:
 * so a call its cap (or the wallet) refuses checks the crossings too (the key's at most once a
 * minute per instance, the account's likewise), and sends any crossing no record stands for
 * (one a stop cut short, or one no charge found: a cap lowered under the spend), naming that
 * request.
 *
 * Delivery: POST of a JSON body; `x-mg-signature: t=<unix s>,v1=<hex HMAC-SHA256 of
 * "<t>.<body>" with the webhook secret>`, `x-mg-timestamp`, and `idempotency-key` (the
 * alert id, stable across retries). Network errors, 408, 429 and 5xx are retried with
 * exponential backoff (at most an hour) up to `maxAttempts`; the gateway's dispose() stops retrying,
 * and gives an attempt already sent a second more to be answered.
 */
import { createHmac } from 'node:crypto';
import type { Services } from '../services.js';
import { formatUsd, parseUsd } from '../billing/money.js';
import { isGatewayError } from '../errors.js';
import type { GatewayConfig } from '../options.js';
import type { GatewayPlugin } from '../pipeline/hooks.js';
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
  /** The ledger entry whose charge crossed the threshold; null when a refused call found it unsent. */
  entry: string | null;
  /** The refused call that found the crossing unsent (a stop cut its delivery short, or no charge found it). */
  request?: string;
}

/**
 * What the crossings are checked after: a charge (its ledger entry), or a call the key's cap or
 * the wallet refused (no entry: its request id).
 */
interface Trigger {
  accountId: string;
  keyId: string;
  at: number;
  entry: string | null;
  request?: string;
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

/** The longest wait between two attempts: a doubling backoff stops growing here. */
const MAX_BACKOFF_MS = 60 * 60 * 1000;

/** The wait after attempt `n` (1-based) failed. */
const backoff = (webhook: AlertsConfig['webhook'], n: number) => Math.min(MAX_BACKOFF_MS, webhook.backoffMs * 2 ** (n - 1));

/** What a mark allows beyond the attempt's own timeout: the store calls around it. */
const MARK_SLACK_MS = 1_000;

/**
 * How long a crossing's "being delivered" mark lasts from now, before an attempt that follows a
 * wait of `waitMs`: the wait, the attempt (its timeout) as long again, and a second. Renewed
 * before each attempt, so the mark outlives a delivery that stopped only briefly.
 */
const markMs = (webhook: AlertsConfig['webhook'], waitMs: number) => waitMs + 2 * webhook.timeoutMs + MARK_SLACK_MS;

/**
 * Marks the crossing as being delivered (by `id`); true for the one caller that marks it first,
 * or first again once a delivery cut short let its mark lapse.
 */
async function firstCrossing(core: Services, cfg: AlertsConfig, scope: string, id: string): Promise<boolean> {
  return (await core.stores.idempotency.begin(scope, id, markMs(cfg.webhook, 0))).state === 'started';
}

/**
 * Keeps this delivery's mark for `ttlMs` more; false when it no longer stands (a balance
 * crossing a top-up re-armed, or a mark that lapsed and another caller took over). Keeping it
 * for a long time is how a crossing is recorded as done with: a mark still in flight is not
 * sent again, and it is one atomic step, so a re-arm in between is never undone.
 */
async function keepMark(core: Services, scope: string, id: string, ttlMs: number): Promise<boolean> {
  const kept = await core.stores.idempotency.renew(scope, id, ttlMs);
  if (!kept) core.log.warn({ msg: 'budget alert mark no longer stands (re-armed, or lapsed and taken over); this delivery stops', alert: id });
  return kept;
}

/**
 * How long an attempt already sent may still take once the gateway stops. A receiver that has
 * the alert is usually answering it: cutting that answer off would let the crossing go, and
 * a later charge would send it a second time. Bounded, so a hung receiver holds up a stop by
 * at most this much.
 */
const STOP_LINGER_MS = 1_000;

/** POSTs one signed alert; true when it is done with (delivered, or refused for good). */
async function attempt(core: Services, webhook: AlertsConfig['webhook'], alert: BudgetAlert, body: string): Promise<boolean> {
  const t = Math.floor(core.now() / 1000);
  const stopped = new AbortController();
  let linger: NodeJS.Timeout | undefined;
  const onStop = () => {
    linger = setTimeout(() => stopped.abort(core.shutdown.reason), STOP_LINGER_MS);
  };
  if (core.shutdown.aborted) onStop();
  else core.shutdown.addEventListener('abort', onStop, { once: true });
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
      signal: AbortSignal.any([AbortSignal.timeout(webhook.timeoutMs), stopped.signal]),
    });
    await res.arrayBuffer().catch(() => undefined);
    if (res.ok) return true;
    if (res.status < 500 && res.status !== 408 && res.status !== 429) {
      core.log.warn({ msg: 'budget alert refused by the webhook; not retried', alert: alert.id, status: res.status });
      return true;
    }
  } catch {
    // A network error or timeout: retried.
  } finally {
    // One listener per attempt on the gateway's signal: removed, or every alert would leave one.
    core.shutdown.removeEventListener('abort', onStop);
    clearTimeout(linger);
  }
  return false;
}

async function deliver(core: Services, webhook: AlertsConfig['webhook'], { alert, scope }: Crossing): Promise<void> {
  const { maxAttempts } = webhook;
  const body = JSON.stringify(alert);
  for (let n = 1; n <= maxAttempts && !core.shutdown.aborted; n++) {
    if (await attempt(core, webhook, alert, body)) {
      await keepMark(core, scope, alert.id, RECORD_TTL_MS);
      return;
    }
    if (n === maxAttempts) break;
    const wait = backoff(webhook, n);
    if (!(await keepMark(core, scope, alert.id, markMs(webhook, wait)))) return;
    // Cut short when the gateway shuts down; the wait's listener goes with it (a retry per
    // alert would otherwise leave one on the gateway's signal for good).
    await pause(wait, core.shutdown);
  }
  if (core.shutdown.aborted) {
    // Its mark is let go at once: the next charge past the crossing (here, after a restart, or
    // on another instance) sends it again.
    core.log.warn({ msg: 'budget alert delivery cut by the stop; sent again by a later charge', alert: alert.id });
    await core.stores.idempotency.renew(scope, alert.id, 1);
    return;
  }
  core.log.warn({ msg: 'budget alert not delivered', alert: alert.id });
  await keepMark(core, scope, alert.id, RECORD_TTL_MS);
}

/** The key's monthly-cap percents crossed, found first by this charge (or refusal). */
async function capCrossings(core: Services, cfg: AlertsConfig, by: Trigger, month: string, capPercent: NonNullable<Thresholds['capPercent']>): Promise<Crossing[]> {
  const found: Crossing[] = [];
  const key = await core.stores.keys.get(by.keyId);
  if (!key?.monthlyCap) return found;
  const spent = (await core.stores.billing.keyUsage(by.accountId, by.keyId, month)).monthly;
  for (const pct of capPercent) {
    // spent >= cap * pct / 100, exactly (percents may have decimals: scaled by 1000).
    if (spent * 100_000n < key.monthlyCap * BigInt(Math.round(pct * 1000))) continue;
    const scope = `alert:cap:${by.accountId}:${by.keyId}:${month}:${pct}`;
    const id = `alrt_${Buffer.from(scope).toString('base64url')}`;
    if (!(await firstCrossing(core, cfg, scope, id))) continue;
    const alert: BudgetAlert = {
      id,
      type: 'budget.key_monthly_cap',
      created: core.now(),
      account: by.accountId,
      key: by.keyId,
      threshold: pct,
      month,
      spentUsd: formatUsd(spent),
      capUsd: formatUsd(key.monthlyCap),
      entry: by.entry,
      ...(by.request ? { request: by.request } : {}),
    };
    found.push({ alert, scope });
  }
  return found;
}

/** The balance-below amounts crossed, found first by this charge (or refusal); re-arms those back above. */
async function balanceCrossings(core: Services, cfg: AlertsConfig, by: Trigger, below: NonNullable<Thresholds['balanceBelowUsd']>): Promise<Crossing[]> {
  const found: Crossing[] = [];
  const balance = (await core.stores.billing.wallet(by.accountId)).balance;
  for (const amount of below) {
    const limit = parseUsd(amount);
    const scope = `alert:balance:${by.accountId}:${formatUsd(limit)}`;
    if (balance >= limit) {
      // Back above (a top-up): the next fall below is a new crossing.
      await core.stores.idempotency.abandon(scope);
      continue;
    }
    // Named by what found it: a balance crossing may come again (a top-up re-arms it).
    const id = `alrt_${Buffer.from(`${scope}:${by.entry ?? by.request}`).toString('base64url')}`;
    if (!(await firstCrossing(core, cfg, scope, id))) continue;
    const alert: BudgetAlert = {
      id,
      type: 'budget.balance_below',
      created: core.now(),
      account: by.accountId,
      key: null,
      threshold: formatUsd(limit),
      balanceUsd: formatUsd(balance),
      entry: by.entry,
      ...(by.request ? { request: by.request } : {}),
    };
    found.push({ alert, scope });
  }
  return found;
}

/** Which crossings a check looks at: a charge looks at both; a refusal at those its throttle lets through. */
interface Looks {
  cap: boolean;
  balance: boolean;
}

async function check(cfg: AlertsConfig, core: Services, by: Trigger, looks: Looks = { cap: true, balance: true }): Promise<void> {
  const t = cfg.accounts[by.accountId] ?? cfg.defaults;
  const found: Crossing[] = [];
  const month = new Date(by.at).toISOString().slice(0, 7);
  const capPercent = cfg.keys[by.keyId]?.capPercent ?? t.capPercent ?? [];
  if (looks.cap && capPercent.length > 0) found.push(...(await capCrossings(core, cfg, by, month, capPercent)));
  const below = t.balanceBelowUsd ?? [];
  if (looks.balance && below.length > 0) found.push(...(await balanceCrossings(core, cfg, by, below)));
  // A store that fails while a delivery ends leaves the mark to lapse (sent again later), never the process down.
  for (const crossing of found) core.track(deliver(core, cfg.webhook, crossing).catch((err: unknown) => core.log.error({ msg: 'budget alert delivery failed', alert: crossing.alert.id, err: String(err) })));
}

/** How often one instance checks the crossings for refusals by the same key's cap or account's wallet. */
const REFUSAL_CHECK_EVERY_MS = 60_000;
/** How many keys and accounts the instance remembers checking for: past this it forgets them all. */
const REFUSAL_CHECKS_KEPT = 10_000;

/**
 * The limit that refused a call, when it was the key's monthly cap or the wallet: the two a
 * charge can cross, and that stop every later charge once reached.
 */
function refusedBy(error: unknown): 'key_monthly_cap' | 'wallet' | null {
  if (!isGatewayError(error) || error.code !== 'insufficient_quota') return null;
  const source = (error.metadata as { limit_source?: unknown } | undefined)?.limit_source;
  return source === 'key_monthly_cap' || source === 'wallet' ? source : null;
}

export function budgetAlerts(cfg: AlertsConfig, getCore: () => Services): GatewayPlugin {
  const checkedAt = new Map<string, number>();
  return {
    name: 'budget-alerts',
    onBilled({ entry }) {
      // Not awaited by the settle: the checks and deliveries run in the background.
      const core = getCore();
      const trigger = { accountId: entry.accountId, keyId: entry.keyId, at: entry.at, entry: entry.id };
      core.track(check(cfg, core, trigger).catch((err: unknown) => core.log.error({ msg: 'budget alert check failed', err: String(err) })));
    },
    onError({ error, requestId, key }) {
      if (!key || !refusedBy(error)) return;
      const core = getCore();
      const now = core.now();
      // The key's cap crossings and the account's balance ones, each on its own throttle: a
      // wallet refusal (checked before the cap) must not keep one key's cap from being looked
      // at because another key of the account was refused first.
      const due = (who: string) => {
        if (now - (checkedAt.get(who) ?? -Infinity) < REFUSAL_CHECK_EVERY_MS) return false;
        if (checkedAt.size >= REFUSAL_CHECKS_KEPT) checkedAt.clear();
        checkedAt.set(who, now);
        return true;
      };
      const looks = { cap: due(`k:${key.id}`), balance: due(`a:${key.account}`) };
      if (!looks.cap && !looks.balance) return;
      const trigger = { accountId: key.account, keyId: key.id, at: now, entry: null, request: requestId };
      core.track(check(cfg, core, trigger, looks).catch((err: unknown) => core.log.error({ msg: 'budget alert check failed', err: String(err) })));
    },
  };
}
