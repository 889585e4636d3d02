/**
 * A webhook for every charge: POSTs the ledger entry as JSON to `url`, signed with
 * HMAC-SHA256 of the body in `x-signature` so the receiver can check it came from us.
 */
import { createHmac } from 'node:crypto';
import type { GatewayPlugin, LedgerEntry } from '../../src/index.js'; // your app: 'model-gateway'

/** The entry as JSON: amounts (nano-USD bigints) as decimal strings, exact. */
export function entryJson(entry: LedgerEntry): string {
  return JSON.stringify(entry, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

export function webhookPerCharge(options: { url: string; secret: string; timeoutMs?: number }): GatewayPlugin {
  return {
    name: 'webhook-per-charge',
    async onBilled({ entry }) {
      const body = entryJson(entry);
      const signature = createHmac('sha256', options.secret).update(body).digest('hex');
      const res = await fetch(options.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-signature': `sha256=${signature}` },
        body,
        signal: AbortSignal.timeout(options.timeoutMs ?? 5_000),
      });
      // A failure is logged by the gateway; the charge itself is already in the ledger.
      if (!res.ok) throw new Error(`webhook answered ${res.status}`);
    },
  };
}
