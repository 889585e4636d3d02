/**
 * The benchmark's Markdown report (bench/run.ts measures, bench/report.ts reads the numbers,
 * this file lays them out): each shape's headline and what its ratios are made of, the real
 * shape first, then the targets, every cell, held streams, workers and the machine.
 */
import { type GuardrailEventCost, guardrailEventLines } from './guardrail-report.js';
import type { HeldResult } from './held.js';
import type { LoadResult } from './load.js';
import {
  type CellSummary,
  type Check,
  cellsOf,
  fmtInt,
  fmtMb,
  fmtMs,
  fmtX,
  headlineCell,
  type Kind,
  kindName,
  median,
  NOISY_CORES,
  perEventUs,
  perEventVsOneWriteUs,
  type Ratios,
  SHAPE_NAMES,
  type Shape,
  shapePrefix,
  type Status,
  type TargetId,
  type TargetSummary,
} from './report.js';
import { STREAM_EVENT_COUNT } from './fixtures.js';
import { HEADLINE_C, type Storage } from './targets.js';
import type { WorkersResult } from './workers.js';

export interface ReportInput {
  intro: string;
  cells: CellSummary[];
  kinds: Kind[];
  concurrency: number[];
  /** Row order and labels of the relays measured (skipped ones carry their reason). */
  rows: Array<{ id: TargetId; label: string; skipped: string | null }>;
  held: Partial<Record<'bare' | Storage, HeldResult>>;
  heldCount: number;
  peakRss: Partial<Record<TargetId, number>>;
  checks: Check[];
  notes: string[];
  allRuns: LoadResult[];
  retries: number;
  /** `serve --workers 2` against one process, per storage. */
  workers: WorkersResult[];
  /** RSS of each gateway's CLI just after it started. */
  idleRss: Partial<Record<Storage, number>>;
  startRss: Partial<Record<Storage, number>>;
  /** Seconds after listening the settled idle RSS was read. */
  idleSettleS: number;
  /** The output guardrails' CPU per streamed event, bare and guarded (bench/guardrail-events.ts). */
  guardrails?: GuardrailEventCost | null;
  reproduce: string;
}

const statusCell = (s: Status) => (s === 'met' ? 'met' : s === 'not met' ? '**not met**' : s);

/**
 * One shape's headline table, its per-event figures and what its ratios are made of. The kind
 * shape's come out exactly as they did before the real shape existed, so old reports compare;
 * the real shape's headings say so. `explain`: print the paragraph on reading the ratios.
 */
function shapeSections(r: ReportInput, shape: Shape, explain: boolean): string[] {
  const md: string[] = [];
  const cells = cellsOf(r.cells, shape);
  const at = (kind: Kind) => headlineCell(cells, kind);
  const kinds = r.kinds;
  const each = (f: (kind: Kind) => string) => kinds.map(f).join(' / ');
  const names = each(kindName);
  const title = shape === 'kind' ? '' : "Real shape (the SDK's defaults, to an alias): ";

  // ---- headline: CPU per call at c=50 ----
  md.push(
    `### ${title}CPU per call at c=${HEADLINE_C}, gateway process / bare relay (${names})`,
    '',
    `| Relay | ${kinds.map((k) => `${kindName(k)}: CPU µs/call | vs bare`).join(' | ')} | req/s (${names}) | storage service CPU µs/call | errors |`,
    `|---|${kinds.map(() => '---:|---:|').join('')}---:|---:|---:|`,
  );
  for (const row of r.rows) {
    if (row.skipped) {
      md.push(`| ${row.label} | skipped: ${row.skipped.replace(/\n/g, ' ').replace(/\|/g, '/')} |${kinds.map(() => ' | |').join('')} | | |`);
      continue;
    }
    const t = (k: Kind) => at(k)?.targets[row.id];
    const storage = kinds.some((k) => Number.isFinite(t(k)?.storageCpuUsPerCall ?? NaN)) ? each((k) => fmtInt(t(k)?.storageCpuUsPerCall ?? NaN)) : '';
    const errors = kinds.reduce((n, k) => n + (t(k)?.errors ?? 0), 0);
    const cols = kinds.map((k) => `${fmtInt(t(k)?.cpuUsPerCall ?? NaN)} | ${row.id === 'bare' ? '' : fmtX(at(k)?.vsBare[row.id]?.cpu ?? NaN)}`);
    md.push(`| ${row.label} | ${cols.join(' | ')} | ${each((k) => fmtInt(t(k)?.rps ?? NaN))} | ${storage} | ${errors} |`);
  }
  const relays = r.rows.filter((row) => !row.skipped && row.id !== 'bare');
  if (kinds.includes('paced') && kinds.includes('paired')) {
    const per = relays.map((row) => `${row.label} ${perEventUs(cells, row.id).toFixed(1)} µs`);
    md.push(
      '',
      `CPU per streamed event over the bare relay (what a relay adds per call paced, less what it adds with the same answer two events per read over the same time, over the ${STREAM_EVENT_COUNT / 2} extra reads; judged): ${per.join(', ')}.`,
    );
  }
  if (kinds.includes('paced') && kinds.includes('stream')) {
    const per = relays.map((row) => `${row.label} ${perEventVsOneWriteUs(cells, row.id).toFixed(1)} µs`);
    md.push(
      '',
      `The same against the answer in one read (paced less one write, over the ${STREAM_EVENT_COUNT - 1} extra reads; not judged: a one-write call comes at two to three times the rate, so a store's batching and the streamed path's per-call cost are in it too): ${per.join(', ')}.`,
    );
  }

  // ---- what the ratios are made of ----
  md.push('', `### ${title}What the ratios are made of`, '');
  // The explanation once, in the first shape's section: the figures mean the same in both.
  if (explain) {
    md.push(
      'The CPU a relay adds per call over the bare relay (µs, against the bare runs next to it), the cores its process kept busy ' +
        `(CPU per call x req/s), and what its latency follows. A relay that keeps one core busy at c=${HEADLINE_C} is bound by its ` +
        `CPU per call: by Little's law its mean latency is ${HEADLINE_C} / req/s, so its latency ratio follows 1 / its req/s ratio, ` +
        'which follows its CPU ratio. A relay that keeps less than a core busy waits on something else (its storage service on the same cores, ' +
        'or a paced upstream).',
      '',
    );
  }
  md.push(
    `| Relay | added CPU µs/call (${names}) | cores busy | CPU vs bare | 1 / req/s vs bare | p50 vs bare | p99 vs bare |`,
    '|---|---:|---:|---:|---:|---:|---:|',
  );
  const cores = (t: TargetSummary | undefined) => (t ? ((t.cpuUsPerCall * t.rps) / 1e6).toFixed(2) : 'n/a');
  for (const row of r.rows) {
    if (row.skipped) continue;
    const busy = each((k) => cores(at(k)?.targets[row.id]));
    if (row.id === 'bare') {
      md.push(`| ${row.label} | | ${busy} | | | | |`);
      continue;
    }
    const all = (f: (v: Ratios) => string) => each((k) => {
      const v = at(k)?.vsBare[row.id];
      return v ? f(v) : 'n/a';
    });
    md.push(
      `| ${row.label} | ${all((v) => fmtInt(v.addedUs))} | ${busy} | ${all((v) => fmtX(v.cpu))} | ${all((v) => fmtX(1 / v.rps))} | ` +
        `${all((v) => fmtX(v.p50))} | ${all((v) => fmtX(v.p99))} |`,
    );
  }
  return md;
}

export function renderMarkdown(r: ReportInput): string {
  const md: string[] = [r.intro, ''];
  const shapes = SHAPE_NAMES.filter((s) => r.cells.some((c) => c.shape === s));
  shapes.forEach((shape, i) => {
    if (i > 0) md.push('');
    md.push(...shapeSections(r, shape, i === 0));
  });

  if (r.guardrails) md.push('', ...guardrailEventLines(r.guardrails));

  // ---- targets ----
  md.push('', '### Targets', '', '| Target | Goal | Measured | |', '|---|---|---|---|');
  for (const ch of r.checks) md.push(`| ${ch.name} | ${ch.goal} | ${ch.actual.replace(/\n/g, ' ').replace(/\|/g, '/')} | ${statusCell(ch.status)} |`);

  // ---- every cell ----
  md.push(
    '',
    '### Every cell',
    '',
    '| Relay | Call | c | req/s | p50 / p99 (ms) | CPU µs/call | vs bare: CPU / p99 / req/s | other load (cores) | errors |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|',
  );
  for (const cell of r.cells) {
    for (const row of r.rows) {
      const t = cell.targets[row.id];
      if (!t) continue;
      const v = cell.vsBare[row.id];
      md.push(
        `| ${row.label} | ${shapePrefix(cell.shape, ': ')}${kindName(cell.kind)} | ${cell.c} | ${fmtInt(t.rps)} | ${fmtMs(t.p50)} / ${fmtMs(t.p99)} | ${fmtInt(t.cpuUsPerCall)} | ` +
          `${row.id === 'bare' || !v ? '' : `${fmtX(v.cpu)} / ${fmtX(v.p99)} / ${fmtX(v.rps)}`} | ${t.otherLoadCores.toFixed(2)} | ${t.errors} |`,
      );
    }
  }

  // ---- held streams ----
  const heldRows = Object.entries(r.held) as Array<['bare' | Storage, HeldResult]>;
  if (heldRows.length) {
    md.push(
      '',
      `### ${r.heldCount.toLocaleString('en-US')} streamed calls held open by a slow upstream (fresh process each)`,
      '',
      '| Relay | idle RSS | held RSS (peak) | growth over idle | per stream | upstream held | completed / errors |',
      '|---|---:|---:|---:|---:|---:|---:|',
    );
    for (const row of r.rows) {
      const h = r.held[row.id as 'bare' | Storage];
      if (!h) continue;
      md.push(
        `| ${row.label} | ${fmtMb(h.idleRss)} | ${fmtMb(h.heldRss)} (${fmtMb(h.heldPeakRss)}) | **${fmtMb(h.growth)}** | ${h.perStreamKb.toFixed(0)} KB | ` +
          `${h.upstreamHeld} | ${h.completed} / ${h.errors}${h.firstError ? ` (${h.firstError.replace(/\|/g, '/')})` : ''} |`,
      );
    }
  }

  // ---- workers, idle RSS ----
  if (r.workers.length) {
    md.push(
      '',
      `### serve --workers 2 against one process (plain, c=${HEADLINE_C}, median of ${r.workers[0]!.rounds} alternating rounds)`,
      '',
      'On this 2-core machine the upstream and the load generator share the cores with the workers: this is what a second core buys here.',
      '',
      '| Storage | 1 process: req/s | CPU µs/call | 2 workers: req/s | CPU µs/call (all processes) | req/s, 2 vs 1 | other load (cores) |',
      '|---|---:|---:|---:|---:|---:|---:|',
    );
    for (const w of r.workers) {
      md.push(
        `| ${w.storage}${w.shape === 'kind' ? '' : ', real shape'} | ${fmtInt(w.one.rps)} | ${fmtInt(w.one.cpuUsPerCall)} | ${fmtInt(w.two.rps)} | ${fmtInt(w.two.cpuUsPerCall)} | ` +
          `${fmtX(w.two.rps / w.one.rps)} | ${w.otherLoadCores.toFixed(2)} |`,
      );
    }
  }
  const idle = Object.entries(r.idleRss).map(([s, b]) => `${s} ${fmtMb(b)}`);
  const started = Object.entries(r.startRss).map(([s, b]) => `${s} ${fmtMb(b)}`);
  if (idle.length || started.length) {
    md.push(
      '',
      `Idle RSS of the CLI (\`serve\`, before its first call), 1 s after it listens: ${started.join(', ')}; ` +
        `settled, ${r.idleSettleS} s after (V8's memory reducer has returned what loading the modules left): ${idle.join(', ')}.`,
    );
  }

  // ---- the machine ----
  const peaks = r.rows.filter((row) => Number.isFinite(r.peakRss[row.id] ?? NaN)).map((row) => `${row.label} ${fmtMb(r.peakRss[row.id]!)}`);
  if (peaks.length) md.push('', `Peak RSS during the load runs: ${peaks.join(', ')}.`);
  const otherLoad = median(r.allRuns.map((x) => x.otherLoadCores));
  const worstLoad = Math.max(...r.allRuns.map((x) => x.otherLoadCores));
  const disturbed = r.allRuns.filter((x) => x.otherLoadCores > NOISY_CORES).length;
  md.push(
    '',
    `Other processes on the machine used ${otherLoad.toFixed(2)} cores during the measurements (median; worst ${worstLoad.toFixed(2)}). ` +
      (disturbed
        ? `${disturbed} of ${r.allRuns.length} measurements still saw more than ${NOISY_CORES} cores of other load after ${r.retries} retries; the medians damp this, but a quiet machine gives steadier numbers.`
        : 'The machine was quiet.'),
  );
  for (const n of r.notes) md.push('', n);
  md.push('', r.reproduce);
  return `${md.join('\n')}\n`;
}
