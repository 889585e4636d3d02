/**
 * The `audit` command's output: one summary line, then one line per difference, so a cron
 * job's mail or log says what is wrong without another tool. The exit code (0 ok, 1 not)
 * is what an alert watches.
 */
import type { AuditDifference, AuditReport } from '../billing/audit.js';

function line(d: AuditDifference): string {
  const what = [
    d.key === undefined ? '' : ` key ${d.key}`,
    d.period === undefined ? '' : ` period ${d.period}`,
    d.hold === undefined ? '' : ` hold ${d.hold}`,
    d.entry === undefined ? '' : ` entry ${d.entry}`,
  ].join('');
  return `  ${d.account}: ${d.check}${what}: expected ${d.expected}, actual ${d.actual}`;
}

/** The report as text, ending in a newline. */
export function auditText(r: AuditReport): string {
  const counted = `${r.accounts} account${r.accounts === 1 ? '' : 's'}, ${r.entries} ledger entr${r.entries === 1 ? 'y' : 'ies'}`;
  const busy = r.unsettled.length
    ? `  not judged: the balance, held and spend of ${r.unsettled.join(', ')} (their books changed during every reading; run the audit again when they are quieter)\n`
    : '';
  if (r.ok) return `audit ok: ${counted}, no differences\n${busy}`;
  const n = r.differences.length;
  return `audit FAILED: ${counted}, ${n} difference${n === 1 ? '' : 's'}\n${r.differences.map(line).join('\n')}\n${busy}`;
}
