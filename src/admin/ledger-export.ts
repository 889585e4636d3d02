/**
 * Ledger entries as export rows (the CLI's `ledger` command): JSON lines or CSV. Amounts are
 * exact USD decimal strings (never floats); times are ISO 8601 UTC.
 */
import { formatUsd } from '../billing/money.js';
import type { LedgerEntry } from '../stores/types.js';

export type LedgerFormat = 'jsonl' | 'csv';

const COLUMNS = [
  'at',
  'id',
  'account',
  'key',
  'model',
  'units',
  'prompt_tokens',
  'completion_tokens',
  'cached_prompt_tokens',
  'cache_write_tokens',
  'reasoning_tokens',
  'images',
  'seconds',
  'tokens',
  'tier',
  'cost_usd',
  'held_usd',
  'exceeded_hold',
  'measured',
  'upstream',
  'reason',
] as const;

type Row = Record<(typeof COLUMNS)[number], string | number | boolean | null>;

function row(e: LedgerEntry): Row {
  const u = e.units;
  return {
    at: new Date(e.at).toISOString(),
    id: e.id,
    account: e.accountId,
    key: e.keyId,
    model: e.model,
    // An operator's correction reads as an adjustment, apart from top-ups and other credits.
    units: u.kind === 'credit' && u.adjustment ? 'adjustment' : u.kind,
    prompt_tokens: u.kind === 'tokens' ? u.prompt : null,
    completion_tokens: u.kind === 'tokens' ? u.completion : null,
    // Parts of the prompt (cache reads, cache writes) and of the completion (reasoning).
    cached_prompt_tokens: u.kind === 'tokens' ? (u.cachedPrompt ?? 0) : null,
    cache_write_tokens: u.kind === 'tokens' ? (u.cacheWrite ?? 0) : null,
    reasoning_tokens: u.kind === 'tokens' ? (u.reasoning ?? 0) : null,
    images: u.kind === 'images' ? u.images : null,
    seconds: u.kind === 'seconds' ? u.seconds : null,
    tokens: u.kind === 'speech_tokens' ? u.tokens : null,
    tier: u.kind === 'images' || u.kind === 'seconds' ? u.tier : null,
    cost_usd: formatUsd(e.cost),
    held_usd: formatUsd(e.held),
    exceeded_hold: e.exceededHold,
    measured: e.measured ?? null,
    upstream: e.upstream ?? null,
    // Credits (top-ups, adjustments): why the operator made them. Their cost_usd is negative.
    reason: u.kind === 'credit' ? u.reason : null,
  };
}

/** A plain decimal number ("12", "-3.25"): a spreadsheet reads it as a number, never a formula. */
const PLAIN_NUMBER = /^-?\d+(\.\d+)?$/;
/** What a spreadsheet takes as the start of a formula (OWASP CSV injection). */
const FORMULA_START = /^[=+\-@\t\r]/;

/**
 * RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled. A text that a
 * spreadsheet would run as a formula (a credit reason is the operator's free text, and a
 * formula in it could send the sheet's data anywhere when opened) is neutralised: a leading
 * `'` makes it text, and it is quoted. Plain numbers stay numbers: credits cost `-3.25`.
 */
function csvField(v: string | number | boolean | null): string {
  if (v === null) return '';
  const s = String(v);
  if (FORMULA_START.test(s) && !PLAIN_NUMBER.test(s)) return `"'${s.replaceAll('"', '""')}"`;
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

export function ledgerHeader(format: LedgerFormat): string | null {
  return format === 'csv' ? `${COLUMNS.join(',')}\n` : null;
}

export function ledgerLine(e: LedgerEntry, format: LedgerFormat): string {
  const r = row(e);
  if (format === 'csv') return `${COLUMNS.map((c) => csvField(r[c])).join(',')}\n`;
  return `${JSON.stringify(r)}\n`;
}
