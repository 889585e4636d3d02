/**
 * examples/next-app as a test runs it: the package built (the example imports it by name),
 * then `next build` and `next start` on a free port, serving `config`. Slow: start it once per
 * file. dist/ and examples/next-app/.next are shared by every run in this checkout, so a lock
 * is held from the build until `stop()`: concurrent runs never rebuild them under each other.
 */
import { acquireLock, freePort, repoRoot, run, spawnServer, writeConfig } from './spawn.js';

const bin = (name: string) => `${repoRoot}node_modules/.bin/${name}`;
const env = { NEXT_TELEMETRY_DISABLED: '1' };

export interface NextExample {
  /** http://127.0.0.1:port: the gateway answers under `${origin}/api`. */
  origin: string;
  stop(): Promise<void>;
}

/** How long a caller's beforeAll may take: waiting for the lock, the two builds, the start. */
export const NEXT_START_TIMEOUT_MS = 420_000;

export async function startNextExample(config: unknown): Promise<NextExample> {
  const release = await acquireLock('next-example', 200_000);
  try {
    await run(bin('tsup'), []);
    await run(bin('next'), ['build', 'examples/next-app'], { env });
    const file = await writeConfig(config);
    const port = await freePort();
    const server = await spawnServer(bin('next'), ['start', 'examples/next-app', '--port', String(port), '--hostname', '127.0.0.1'], {
      env: { ...env, MODEL_GATEWAY_CONFIG: file },
      ready: /Ready in/,
      timeoutMs: 30_000,
    });
    return {
      origin: `http://127.0.0.1:${port}`,
      async stop() {
        await server.stop();
        await release();
      },
    };
  } catch (err) {
    await release();
    throw err;
  }
}
