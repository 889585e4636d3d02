/**
 * The peer: another Node AI gateway, `@portkey-ai/gateway` from npm, measured by the same
 * driver against the same upstream as the bare relay and our gateway.
 *
 * It is not a dependency of the project: a benchmark run installs the pinned version into
 * bench/.peer (gitignored) the first time and reuses it after. When the install fails or the
 * server does not answer correctly, the peer row is reported as skipped with the reason.
 *
 * What it needs, found by running it:
 * - The server is `build/start-server.js --port=N --headless` (no port 0: it prints the port it
 *   was given, so the driver picks a free one). `--headless` leaves out the web console and its
 *   log stream, which a production deployment would not serve either.
 * - It routes by headers: `x-portkey-provider: openai`, `x-portkey-custom-host: <upstream>/v1`
 *   and any bearer token, which it forwards to the upstream.
 * - `@hono/node-server` is pinned to 1.14.1 by an npm override. From 1.14.2 on, that package's
 *   Response reuses the upstream response's immutable headers, so every streamed call fails
 *   with "TypeError: immutable" when Portkey adds its own headers (plain calls still work).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';

export const PEER_PACKAGE = '@portkey-ai/gateway';
export const PEER_VERSION = '1.15.2';
/** The newest @hono/node-server whose Response keeps headers mutable (see above). */
const HONO_NODE_SERVER = '1.14.1';

/** The peer's label in reports. */
export const PEER_LABEL = `${PEER_PACKAGE} ${PEER_VERSION}`;

/** Printed by the server once it listens (wrapped in terminal colour codes). */
export const PEER_READY = /(http:\/\/localhost:\d+)/;

export type PeerInstall = { entry: string; dir: string } | { skipped: string };

const versionOf = (dir: string, pkg: string): string | null => {
  try {
    return (JSON.parse(readFileSync(join(dir, 'node_modules', pkg, 'package.json'), 'utf8')) as { version?: string }).version ?? null;
  } catch {
    return null;
  }
};

/** npm's own words for a failed install: its error code and the first line that says what happened. */
function npmFailure(stderr: string): string | null {
  const lines = stderr.split('\n').map((l) => l.replace(/^npm (?:error|ERR!) ?/, '').trim());
  const code = lines.find((l) => l.startsWith('code '))?.slice(5);
  const what = lines.find((l) => l !== '' && !/^(code|syscall|errno|at) /.test(l) && !l.startsWith('A complete log'));
  return code || what ? [code, what].filter(Boolean).join(': ') : null;
}

/** Installs the pinned peer into `dir` unless it is there already; never throws. */
export async function installPeer(dir: string, log: (s: string) => void): Promise<PeerInstall> {
  const entry = join(dir, 'node_modules', PEER_PACKAGE, 'build/start-server.js');
  const installed = () => versionOf(dir, PEER_PACKAGE) === PEER_VERSION && versionOf(dir, '@hono/node-server') === HONO_NODE_SERVER && existsSync(entry);
  if (installed()) return { entry, dir };
  log(`installing ${PEER_LABEL} into ${dir} (once; it is not a dependency of the project)`);
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, 'package.json'),
      `${JSON.stringify({ private: true, dependencies: { [PEER_PACKAGE]: PEER_VERSION }, overrides: { '@hono/node-server': HONO_NODE_SERVER } }, null, 2)}\n`,
    );
    await new Promise<void>((resolve, reject) =>
      execFile(
        'npm',
        ['install', '--prefix', dir, '--no-audit', '--no-fund', '--loglevel=error'],
        { timeout: 300_000, maxBuffer: 16 * 1024 * 1024 },
        (err, _stdout, stderr) => (err ? reject(new Error(npmFailure(String(stderr)) ?? err.message.split('\n')[0]!)) : resolve()),
      ),
    );
  } catch (err) {
    return { skipped: `npm install ${PEER_PACKAGE}@${PEER_VERSION} failed: ${(err as Error).message}` };
  }
  return installed() ? { entry, dir } : { skipped: `npm install ${PEER_PACKAGE}@${PEER_VERSION} left no ${entry}` };
}

/** The headers that route a call through the peer to our upstream. */
export function peerHeaders(upstreamUrl: string): Record<string, string> {
  return { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${upstreamUrl}/v1`, authorization: 'Bearer sk-bench-peer' };
}

/**
 * What a body says, independent of how it is serialised: a JSON body parsed, an SSE body as the
 * list of its parsed `data:` payloads (`[DONE]` kept as the string). Used to check a relay that
 * re-serialises answers, where a byte-for-byte comparison would count correct answers as wrong.
 */
function contentOf(body: string): unknown {
  const trimmed = body.trimStart();
  if (!trimmed.startsWith('data:')) return JSON.parse(body) as unknown;
  const events: unknown[] = [];
  for (const block of body.split(/\r?\n\r?\n/)) {
    const data = block
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trimStart())
      .join('\n');
    if (data === '') continue;
    events.push(data === '[DONE]' ? data : (JSON.parse(data) as unknown));
  }
  return events;
}

/** A body check that passes when `body` says what `expected` says (see contentOf). */
export function sameContentAs(expected: string): (body: string) => boolean {
  const want = contentOf(expected);
  return (body) => {
    try {
      return isDeepStrictEqual(contentOf(body), want);
    } catch {
      return false;
    }
  };
}
