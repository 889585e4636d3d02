/**
 * The deployment image: examples/deploy/Dockerfile built with podman and run the way
 * docs/deploy.md says (`--init`, the port published, the config mounted over the image's, the
 * admin digest from the environment), with the deploy config's upstream swapped for the
 * simulator. It turns ready, its HEALTHCHECK passes, the official `openai` client chats through
 * the published port, and SIGTERM (the image's STOPSIGNAL) drains it to exit 0.
 *
 * The base is a local stand-in for node:20-bookworm-slim (no registry is reachable where these
 * tests run), made by `.ci/container-base`: Debian bookworm and this machine's Node 20. The test
 * needs podman and that image; it says why it skips without them, except under CI=true, where
 * `.ci/run` provides both and their absence fails.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, repoRoot, run } from './spawn.js';

const BASE = process.env.MG_CONTAINER_BASE ?? 'localhost/mg-node20-bookworm';

function succeeds(command: string, args: string[]): boolean {
  return spawnSync(command, args, { stdio: 'ignore' }).status === 0;
}

const problem = !succeeds('podman', ['--version'])
  ? 'podman is not installed'
  : !succeeds('podman', ['image', 'exists', BASE])
    ? `the base image ${BASE} does not exist (make it with .ci/container-base, as root)`
    : null;
if (problem !== null && process.env.CI === 'true') {
  throw new Error(`The container image test cannot run: ${problem}. Required under CI=true.`);
}
if (problem !== null) console.warn(`\n!!! SKIPPING the container image test: ${problem}.\n`);

/**
 * Flags every podman call needs on machines like the test machine. crun refuses a host whose
 * cgroups are mixed v1 and v2 ("hybrid"); runc runs there, so it is used when installed. And
 * podman raises a container's open-file and process limits past the caller's hard limits by
 * default, which a process without the right to raise them (a sandbox's root) is refused:
 * the limits given here stay under this process's own.
 */
function podmanFlags(): { global: string[]; limits: string[] } {
  const hard = spawnSync('sh', ['-c', 'ulimit -Hn; ulimit -Hu'], { encoding: 'utf8' }).stdout.trim().split('\n');
  const cap = (value: string | undefined, most: number) => (value && /^\d+$/.test(value) ? Math.min(Number(value), most) : most);
  const files = cap(hard[0], 65_536);
  const processes = cap(hard[1], 4_096);
  return {
    global: succeeds('runc', ['--version']) ? ['--runtime', 'runc'] : [],
    limits: ['--ulimit', `nofile=${files}:${files}`, '--ulimit', `nproc=${processes}:${processes}`],
  };
}

async function waitReady(url: string, container: () => Promise<string>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await fetch(url).then((r) => r.status, () => 0);
    if (status === 200) return;
    if (Date.now() > deadline) throw new Error(`${url} not ready in ${timeoutMs} ms (last status ${status}):\n${await container()}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

describe.skipIf(problem !== null)('the deployment image (examples/deploy/Dockerfile)', () => {
  const suffix = randomBytes(4).toString('hex');
  const image = `localhost/mg-gateway-test:${suffix}`;
  const name = `mg-gateway-test-${suffix}`;
  const key = `sk-mg-${randomBytes(20).toString('hex')}`;
  const { global, limits } = podmanFlags();
  const podman = (args: string[]) => run('podman', [...global, ...args]);
  const logs = () => podman(['logs', name]).catch((err: Error) => err.message);
  let dir: string;
  let port: number;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mg-container-'));
    // The documented file, unchanged but for its base. --format docker: the OCI format podman
    // writes by default has no HEALTHCHECK. --layers=false: no cached layers left behind.
    await podman([
      'build', ...limits, '--format', 'docker', '--layers=false', '--build-arg', `BASE=${BASE}`,
      '-f', 'examples/deploy/Dockerfile', '--ignorefile', 'examples/deploy/Dockerfile.dockerignore', '-t', image, '.',
    ]);

    // The deploy config as shipped, its OpenAI upstream replaced by the simulator, an account
    // and key to call with.
    const config = JSON.parse(await readFile(join(repoRoot, 'examples/deploy/gateway.config.json'), 'utf8')) as Record<string, unknown>;
    config.upstreams = { openai: { simulate: true, kind: 'openai' } };
    config.accounts = [{ id: 'container', walletUsd: '5.00' }];
    config.keys = [{ key, account: 'container', kind: 'developer' }];
    const file = join(dir, 'gateway.config.json');
    await writeFile(file, JSON.stringify(config, null, 2));

    port = await freePort();
    await podman([
      'run', '-d', '--init', '--name', name, ...limits, '-p', `127.0.0.1:${port}:8080`,
      '-v', `${file}:/etc/model-gateway/gateway.config.json:ro`,
      '-e', `ADMIN_TOKEN_SHA256=${'ab'.repeat(32)}`, image,
    ]);
    await waitReady(`http://127.0.0.1:${port}/ready`, logs, 60_000);
  }, 1_200_000);

  afterAll(async () => {
    await podman(['rm', '-f', '-v', name]).catch(() => {});
    await podman(['rmi', '-f', image]).catch(() => {});
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('passes its own HEALTHCHECK', async () => {
    await podman(['healthcheck', 'run', name]);
  });

  it('answers the official openai client through the published port, billed', async () => {
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
    const answer = await client.chat.completions.create({
      model: 'openai/gpt-4o-mini',
      messages: [{ role: 'user', content: 'Hello from a container!' }],
    });
    expect(answer.choices[0]?.message.content).toBeTruthy();
    expect(answer.usage?.prompt_tokens).toBeGreaterThan(0);
    // The charge is in the books the container keeps on its volume.
    const { data } = (await fetch(`http://127.0.0.1:${port}/v1/key`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.json())) as {
      data: { usage: number; wallet: { balance: number } };
    };
    expect(data.usage).toBeGreaterThan(0);
    expect(data.wallet.balance).toBeLessThan(5);
  });

  it('drains on SIGTERM (podman stop) and exits 0', async () => {
    const started = Date.now();
    await podman(['stop', '-t', '40', name]);
    const state = (await podman(['inspect', '--format', '{{.State.ExitCode}} {{.State.Status}}', name])).trim();
    expect(state, await logs()).toBe('0 exited');
    // Well inside the 40 s podman would wait before it kills: SIGTERM itself ended it.
    expect(Date.now() - started).toBeLessThan(30_000);
  }, 60_000);
});
