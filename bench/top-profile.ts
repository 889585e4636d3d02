/**
 * Summarises a V8 .cpuprofile (from `node --cpu-prof`): the top self-time functions with
 * url:line, self time grouped by file / package, and the project's own functions by total
 * (inclusive) time.
 *
 * node --import tsx bench/top-profile.ts [FILE.cpuprofile | DIR] [--top 25]
 * node --import tsx bench/top-profile.ts [FILE | DIR] --callers writev [--callers NAME ...] [--depth 3]
 *   (a DIR means its newest main-thread profile; default DIR bench/results/profiles)
 *
 * Lines of project .ts files are source lines: tsx hands V8 esbuild output with all
 * whitespace minified (one long line per file), so positions are mapped back through a
 * source map of the same transform tsx does (esbuild, minifyWhitespace + keepNames).
 * node_modules and node: lines are as V8 reports them (1-based).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire, SourceMap } from 'node:module';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Row {
  name: string;
  where: string;
  selfMs: number;
  pct: number;
}

export interface ProfileSummary {
  file: string;
  /** Sampled ms, idle excluded. */
  busyMs: number;
  idleMs: number;
  top: Row[];
  byFile: Row[];
  projectInclusive: Row[];
}

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

type Esbuild = typeof import('esbuild');
let esbuild: Esbuild | null | undefined;
const maps = new Map<string, SourceMap | null>();

/** Source map of the code tsx ran for a project .ts file (same esbuild options as tsx 4). */
async function sourceMapFor(file: string): Promise<SourceMap | null> {
  if (maps.has(file)) return maps.get(file)!;
  let map: SourceMap | null = null;
  try {
    if (esbuild === undefined) {
      // tsx's own esbuild (it may pin another version than the one hoisted to node_modules).
      try {
        esbuild = createRequire(join(ROOT, 'node_modules/tsx/package.json'))('esbuild') as Esbuild;
      } catch {
        esbuild = null;
      }
    }
    if (esbuild) {
      const tsconfig = JSON.parse(readFileSync(join(ROOT, 'tsconfig.json'), 'utf8')) as { compilerOptions?: object };
      const out = await esbuild.transform(readFileSync(file, 'utf8'), {
        loader: 'ts',
        format: 'esm',
        target: `node${process.versions.node}`,
        sourcemap: 'external',
        minifyWhitespace: true,
        keepNames: true,
        sourcefile: file,
        tsconfigRaw: { compilerOptions: tsconfig.compilerOptions ?? {} } as never,
      });
      map = new SourceMap(JSON.parse(out.map) as ConstructorParameters<typeof SourceMap>[0]);
    }
  } catch {
    map = null;
  }
  maps.set(file, map);
  return map;
}

function shortUrl(url: string): string {
  if (!url) return '';
  if (url.startsWith('node:')) return url;
  let path = url;
  if (url.startsWith('file://')) path = fileURLToPath(url);
  const nm = path.lastIndexOf('/node_modules/');
  if (nm !== -1) return path.slice(nm + '/node_modules/'.length);
  return path.startsWith(ROOT) ? relative(ROOT, path) : path;
}

const isProjectTs = (url: string) => url.startsWith('file://') && url.endsWith('.ts') && !url.includes('/node_modules/');

async function locate(cf: CallFrame): Promise<string> {
  const short = shortUrl(cf.url);
  if (!short) return '';
  if (isProjectTs(cf.url)) {
    const map = await sourceMapFor(fileURLToPath(cf.url));
    const entry = map?.findEntry(cf.lineNumber, cf.columnNumber) as { originalLine?: number } | undefined;
    if (entry && typeof entry.originalLine === 'number') return `${short}:${entry.originalLine + 1}`;
    return `${short}:?`;
  }
  return `${short}:${cf.lineNumber + 1}`;
}

/** Package (or project file) a frame belongs to. */
function area(url: string): string {
  const short = shortUrl(url);
  if (!short) return '(native / VM)';
  if (short.startsWith('node:')) return 'node: (core)';
  if (url.includes('/node_modules/')) {
    const parts = short.split('/');
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  return short;
}

export async function summarize(file: string, topN = 25): Promise<ProfileSummary> {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  const { samples, timeDeltas } = profile;
  for (let i = 0; i < samples.length; i++) {
    // A sample's duration is the gap to the next one (the last gets the mean).
    const dt = i + 1 < timeDeltas.length ? timeDeltas[i + 1]! : (profile.endTime - profile.startTime) / samples.length;
    self.set(samples[i]!, (self.get(samples[i]!) ?? 0) + dt / 1000);
  }

  let idleMs = 0;
  let busyMs = 0;
  const rows = new Map<string, { name: string; cf: CallFrame; ms: number }>();
  const files = new Map<string, number>();
  for (const [id, ms] of self) {
    const cf = byId.get(id)!.callFrame;
    if (cf.functionName === '(idle)') {
      idleMs += ms;
      continue;
    }
    busyMs += ms;
    const key = `${cf.functionName}|${cf.url}|${cf.lineNumber}|${cf.columnNumber}`;
    const row = rows.get(key) ?? { name: cf.functionName || '(anonymous)', cf, ms: 0 };
    row.ms += ms;
    rows.set(key, row);
    const a = area(cf.url);
    files.set(a, (files.get(a) ?? 0) + ms);
  }

  const pct = (ms: number) => (busyMs ? (ms / busyMs) * 100 : 0);
  const top: Row[] = [];
  for (const r of [...rows.values()].sort((a, b) => b.ms - a.ms).slice(0, topN)) {
    top.push({ name: r.name, where: await locate(r.cf), selfMs: r.ms, pct: pct(r.ms) });
  }
  const byFile = [...files.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 15)
    .map(([name, ms]) => ({ name, where: '', selfMs: ms, pct: pct(ms) }));

  // Inclusive time of the project's own functions, each counted once per stack (recursion-safe).
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const inclusive = new Map<string, { cf: CallFrame; ms: number }>();
  for (const [id, ms] of self) {
    if (byId.get(id)!.callFrame.functionName === '(idle)') continue;
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const cf = byId.get(cur)!.callFrame;
      if (!isProjectTs(cf.url)) continue;
      const key = `${cf.functionName}|${cf.url}|${cf.lineNumber}|${cf.columnNumber}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const e = inclusive.get(key) ?? { cf, ms: 0 };
      e.ms += ms;
      inclusive.set(key, e);
    }
  }
  const projectInclusive: Row[] = [];
  for (const e of [...inclusive.values()].sort((a, b) => b.ms - a.ms).slice(0, Math.max(15, topN))) {
    projectInclusive.push({ name: e.cf.functionName || '(anonymous)', where: await locate(e.cf), selfMs: e.ms, pct: pct(e.ms) });
  }
  return { file, busyMs, idleMs, top, byFile, projectInclusive };
}

/**
 * Where the time of a function goes in from: self time of frames named `name`, grouped by
 * their nearest `depth` callers (the first caller outside node: internals is shown too).
 */
export async function callersOf(file: string, name: string, depth = 3, topN = 12): Promise<string> {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const hits = new Map<number, number>();
  for (const id of profile.samples) hits.set(id, (hits.get(id) ?? 0) + 1);
  const msPerSample = (profile.endTime - profile.startTime) / 1000 / profile.samples.length;
  const stacks = new Map<string, number>();
  let total = 0;
  for (const [id, n] of hits) {
    const cf = byId.get(id)!.callFrame;
    if (cf.functionName !== name) continue;
    total += n;
    const chain: string[] = [];
    let outside = '';
    for (let cur = parent.get(id); cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur)!.callFrame;
      if (!f.url && !f.functionName) continue;
      const label = `${f.functionName || '(anonymous)'} ${await locate(f)}`.trim();
      if (chain.length < depth) chain.push(label);
      if (!f.url.startsWith('node:') && f.url) {
        outside = label;
        break;
      }
    }
    const key = chain.join(' <- ') + (outside && !chain.includes(outside) ? ` <- ... <- ${outside}` : '');
    stacks.set(key, (stacks.get(key) ?? 0) + n);
  }
  const lines = [`${name}: ${(total * msPerSample).toFixed(0)} ms self, by caller:`];
  for (const [k, n] of [...stacks.entries()].sort((a, b) => b[1] - a[1]).slice(0, topN)) {
    lines.push(`${((n / Math.max(1, total)) * 100).toFixed(1).padStart(6)}%  ${k || '(root)'}`);
  }
  return lines.join('\n');
}

export function formatSummary(s: ProfileSummary): string {
  const line = (r: Row) => `${r.pct.toFixed(1).padStart(6)}%  ${r.selfMs.toFixed(0).padStart(7)} ms  ${r.name}${r.where ? `  ${r.where}` : ''}`;
  return [
    `profile ${relative(process.cwd(), s.file)}: ${(s.busyMs / 1000).toFixed(1)} s busy, ${(s.idleMs / 1000).toFixed(1)} s idle (percentages are of busy time)`,
    '',
    `top ${s.top.length} functions by self time:`,
    ...s.top.map(line),
    '',
    'self time by package / file:',
    ...s.byFile.map(line),
    '',
    'project functions by total time (synchronous callees included; an async function counts per resumed segment):',
    ...s.projectInclusive.map(line),
  ].join('\n');
}

/** The newest main-thread profile (Node's default name, thread id 0) under `dir`, else the newest of any. */
function newestProfile(dir: string): string {
  const all: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith('.cpuprofile')) all.push(join(d, e.name));
    }
  };
  walk(dir);
  const newest = (xs: string[]) => xs.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
  const found = newest(all.filter((f) => /\.\d+\.0\.\d+\.cpuprofile$/.test(f))) ?? newest(all);
  if (!found) throw new Error(`no .cpuprofile under ${dir}`);
  return found;
}

const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href;
if (isMain) {
  const { values, positionals } = parseArgs({
    options: { top: { type: 'string', default: '25' }, callers: { type: 'string', multiple: true }, depth: { type: 'string', default: '3' } },
    allowPositionals: true,
  });
  const target = resolve(positionals[0] ?? join(ROOT, 'bench/results/profiles'));
  const file = statSync(target).isDirectory() ? newestProfile(target) : target;
  if (values.callers?.length) {
    for (const name of values.callers) process.stdout.write(`${await callersOf(file, name, Number(values.depth))}\n\n`);
  } else {
    process.stdout.write(`${formatSummary(await summarize(file, Number(values.top)))}\n`);
  }
}
