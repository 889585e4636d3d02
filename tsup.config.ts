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
      redis: 'src/stores/redis/entry.ts',
      sqlite: 'src/stores/sqlite/entry.ts',
      postgres: 'src/stores/postgres/entry.ts',
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
    // The SQLite stores load better-sqlite3 (an optional peer) with createRequire(import.meta.url);
    // the CJS build needs import.meta.url shimmed.
    shims: true,
  },
  {
    entry: { cli: 'src/cli.ts' },
    format: ['esm'],
    // The CLI loads the Redis, PostgreSQL and SQLite stores on demand (stores/NAME/entry.js,
    // imported by stores/from-storage.ts);
    // those imports point at the published dist/redis.js, dist/postgres.js and dist/sqlite.js,
    // so each optional peer (ioredis, postgres, better-sqlite3) is needed only when configured.
    esbuildPlugins: [
      {
        name: 'store-subpaths-external',
        setup(build) {
          build.onResolve({ filter: /^(?:\.\.?\/)+(?:stores\/)?(redis|postgres|sqlite)\/entry\.js$/ }, (args) => ({
            path: `./${/(redis|postgres|sqlite)/.exec(args.path)![1]}.js`,
            external: true,
          }));
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
