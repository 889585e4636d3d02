/**
 * What an adopter does, from the README's "Add it to your app": a fresh app installs the
 * gateway as a git dependency (npm clones it, installs its dev toolchain in the clone and runs
 * the `prepare` build), mounts it with the README's server snippet, and chats through it with
 * the official `openai` client. The repository is a clone of this checkout's HEAD, reached
 * over `git+file://`; packages come from npm's cache (`--prefer-offline`).
 */
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, repoRoot, run, spawnServer, type Spawned } from './spawn.js';

/** The README section's fenced blocks, in order: [language, body]. */
async function readmeBlocks(heading: string): Promise<Array<[string, string]>> {
  const readme = await readFile(join(repoRoot, 'README.md'), 'utf8');
  const start = readme.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`README.md has no "## ${heading}" section`);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((m) => [m[1]!, m[2]!]);
}

describe('installed into a fresh app from the git repository', () => {
  let dir: string;
  let app: string;
  let server: Spawned | undefined;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mg-install-'));
    const repo = join(dir, 'model-gateway');
    await run('git', ['clone', '--quiet', repoRoot, repo]);
    // Only to keep this test within minutes: offline, better-sqlite3 (a dev dependency for the
    // SQLite tests, not used by the build) compiles from source for minutes, where an adopter
    // online downloads its prebuilt binary. The clone's policy skips that one install script.
    const manifest = JSON.parse(await readFile(join(repo, 'package.json'), 'utf8')) as { allowScripts: Record<string, boolean> };
    manifest.allowScripts['better-sqlite3'] = false;
    await writeFile(join(repo, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    const git = ['-c', 'user.name=test', '-c', 'user.email=test@localhost'];
    await run('git', [...git, 'commit', '--quiet', '-am', 'test: skip the better-sqlite3 build'], { cwd: repo });

    app = join(dir, 'app');
    await mkdir(app);
    await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'adopter-app', version: '1.0.0', private: true }));
    const [[shell, install], [js, snippet]] = (await readmeBlocks('Add it to your app')) as [[string, string], [string, string]];
    expect([shell, js]).toEqual(['sh', 'js']);
    // The README's install line, with this clone's URL for the repository's.
    const line = install.split('\n').find((l) => l.startsWith('npm install git+'));
    if (!line) throw new Error('README has no `npm install git+...` line');
    const args = line.replace(/#.*$/, '').trim().split(/\s+/).slice(1);
    args[1] = `git+file://${repo}`;
    await run('npm', [...args, '--prefer-offline', '--no-audit', '--no-fund'], { cwd: app });
    await writeFile(join(app, 'server.mjs'), snippet);
  }, 540_000);

  afterAll(async () => {
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('is built on install: dist/ is in the app though the repository holds none', async () => {
    const installed = join(app, 'node_modules', 'model-gateway');
    expect((await stat(join(installed, 'dist', 'index.js'))).isFile()).toBe(true);
    expect((await stat(join(installed, 'dist', 'cli.js'))).isFile()).toBe(true);
    expect(await run('git', ['ls-files', 'dist'], { cwd: join(dir, 'model-gateway') })).toBe('');
    const lock = JSON.parse(await readFile(join(app, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { resolved?: string }>;
    };
    expect(lock.packages['node_modules/model-gateway']?.resolved).toMatch(/^git\+file:\/\//);
  });

  it("serves a chat with the README's lines, to the official openai client", async () => {
    const port = await freePort();
    server = await spawnServer(process.execPath, ['server.mjs'], {
      cwd: app,
      env: { PORT: String(port) },
      ready: /key, shown once: (sk-mg-\S+)[\s\S]*listening on (http:\/\/\S+)/,
      timeoutMs: 30_000,
    });
    const [, key, baseURL] = server.match;
    expect(baseURL).toBe(`http://127.0.0.1:${port}/v1`);
    const client = new OpenAI({ baseURL, apiKey: key! });
    const answer = await client.chat.completions.create({ model: 'sim/fast-chat', messages: [{ role: 'user', content: 'Hello!' }] });
    expect(answer.choices[0]?.message.content).toBeTruthy();
    expect(answer.usage?.total_tokens).toBeGreaterThan(0);
    const stream = await client.chat.completions.create({ model: 'sim/fast-chat', messages: [{ role: 'user', content: 'Stream it' }], stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text.length).toBeGreaterThan(0);
    // The wallet paid for both calls.
    const spent = (await (await fetch(`${baseURL}/key`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { usage: number } };
    expect(spent.data.usage).toBeGreaterThan(0);
  });
});
