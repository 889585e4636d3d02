/**
 * The published build: ESM (.js) and CJS (.cjs) with their own declarations (.d.ts, .d.cts)
 * for the library and each subpath; the CLI as one ESM file with its shebang. Dependencies
 * and optional peers stay external (tsup's default for everything in package.json).
 */
import { defineConfig } from 'tsup';

export default defineConfig([
  {
    entry: {
      index: 'src/index.ts',
      redis: 'src/redis.ts',
      express: 'adapters/express.ts',
      fastify: 'adapters/fastify.ts',
      next: 'adapters/next.ts',
      bun: 'adapters/bun.ts',
    },
    format: ['esm', 'cjs'],
    dts: true,
    target: 'node20',
    platform: 'node',
    splitting: true,
    sourcemap: false,
    // Both builds run at once: this one's cleaning must spare the CLI's output.
    clean: ['!cli.js'],
    treeshake: true,
    removeNodeProtocol: false,
  },
  {
    entry: { cli: 'src/cli.ts' },
    format: ['esm'],
    // The CLI loads Redis storage on demand; keep that import pointing at the published
    // dist/redis.js, so ioredis (an optional peer) is only needed when Redis is configured.
    esbuildPlugins: [
      {
        name: 'redis-subpath-external',
        setup(build) {
          build.onResolve({ filter: /^\.\/redis\.js$/ }, () => ({ path: './redis.js', external: true }));
        },
      },
    ],
    target: 'node20',
    platform: 'node',
    splitting: false,
    sourcemap: false,
    clean: false,
    removeNodeProtocol: false,
  },
]);
