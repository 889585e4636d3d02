/**
 * The published package as a user gets it: `npm pack` (its prepare script builds with tsup) in a
 * copy of the repository, the tarball unpacked into a fresh project's node_modules, then
 * every subpath imported from ESM and required from CJS, the bin run, and the types checked
 * from a NodeNext TypeScript project. Dependencies come from this repository's node_modules,
 * linked above the fresh project, so nothing is downloaded.
 */
import { cp, mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, repoRoot, run, spawnServer, writeConfig } from './spawn.js';

/** The script's own result: its last line (the gateway's access lines come before it on stdout). */
function lastJsonLine(stdout: string): Record<string, unknown> {
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as Record<string, unknown>;
}

const SUBPATHS = [
  'model-gateway',
  'model-gateway/express',
  'model-gateway/fastify',
  'model-gateway/next',
  'model-gateway/bun',
  'model-gateway/redis',
  'model-gateway/sqlite',
  'model-gateway/postgres',
];
/** One export each subpath must have, and its type. */
const EXPECTED: Record<string, [name: string, type: string]> = {
  'model-gateway': ['createGateway', 'function'],
  'model-gateway/express': ['toExpress', 'function'],
  'model-gateway/fastify': ['toFastify', 'function'],
  'model-gateway/next': ['toNext', 'function'],
  'model-gateway/bun': ['toBun', 'function'],
  'model-gateway/redis': ['createRedisStores', 'function'],
  'model-gateway/sqlite': ['createSqliteStores', 'function'],
  'model-gateway/postgres': ['createPostgresStores', 'function'],
};

describe('the packed tarball', () => {
  let dir: string;
  let app: string;
  let files: string[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mg-pack-'));
    // A copy of what the build reads, so the build never races with one in the repository.
    const source = join(dir, 'source');
    await mkdir(source);
    for (const entry of ['package.json', 'tsconfig.json', 'tsup.config.ts', 'README.md', 'LICENSE', 'src', 'adapters']) {
      await cp(join(repoRoot, entry), join(source, entry), { recursive: true });
    }
    await symlink(join(repoRoot, 'node_modules'), join(source, 'node_modules'), 'dir');
    const stdout = await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: source });
    // The prepack build writes to stdout too; npm's JSON report comes last.
    const packed = JSON.parse(stdout.slice(stdout.search(/^\[/m))) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    files = packed[0]!.files.map((f) => f.path);

    // The fresh project: the tarball in its node_modules, dependencies one level up.
    app = join(dir, 'app');
    const installed = join(app, 'node_modules', 'model-gateway');
    await mkdir(installed, { recursive: true });
    await run('tar', ['-xzf', join(dir, packed[0]!.filename), '-C', installed, '--strip-components=1']);
    await symlink(join(repoRoot, 'node_modules'), join(dir, 'node_modules'), 'dir');
    await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  }, 170_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('holds the build and nothing of the sources or tests', () => {
    expect(files).toContain('package.json');
    expect(files).toContain('dist/cli.js');
    // The license package.json names ships with it.
    expect(files).toContain('LICENSE');
    for (const name of ['index', 'express', 'fastify', 'next', 'bun', 'redis', 'sqlite', 'postgres']) {
      for (const ext of ['.js', '.cjs', '.d.ts', '.d.cts']) expect(files).toContain(`dist/${name}${ext}`);
    }
    expect(files.filter((f) => !f.startsWith('dist/') && !['package.json', 'README.md', 'LICENSE'].includes(f))).toEqual([]);
  });

  it('imports every subpath from ESM', async () => {
    const script = [
      `import pkg from 'model-gateway/package.json' with { type: 'json' };`,
      `const out = { version: pkg.version };`,
      ...SUBPATHS.map((s, i) => `import * as m${i} from '${s}'; out['${s}'] = typeof m${i}['${EXPECTED[s]![0]}'];`),
      `const { createGateway } = m0;`,
      `const gateway = createGateway({});`,
      `out.health = (await gateway.fetch(new Request('http://localhost/health'))).status;`,
      `await gateway.dispose();`,
      `console.log(JSON.stringify(out));`,
    ].join('\n');
    await writeFile(join(app, 'esm.mjs'), script);
    const out = lastJsonLine(await run(process.execPath, ['esm.mjs'], { cwd: app }));
    for (const s of SUBPATHS) expect(out[s], s).toBe(EXPECTED[s]![1]);
    expect(out.health).toBe(200);
    expect(out.version).toBe('0.1.0');
  });

  it('requires every subpath from CJS', async () => {
    const script = [
      `const out = { version: require('model-gateway/package.json').version };`,
      ...SUBPATHS.map((s) => `out['${s}'] = typeof require('${s}')['${EXPECTED[s]![0]}'];`),
      `const gateway = require('model-gateway').createGateway({});`,
      `Promise.resolve(gateway.fetch(new Request('http://localhost/health'))).then(async (res) => {`,
      `  out.health = res.status;`,
      `  await gateway.dispose();`,
      `  console.log(JSON.stringify(out));`,
      `});`,
    ].join('\n');
    await writeFile(join(app, 'cjs.cjs'), script);
    const out = lastJsonLine(await run(process.execPath, ['cjs.cjs'], { cwd: app }));
    for (const s of SUBPATHS) expect(out[s], s).toBe(EXPECTED[s]![1]);
    expect(out.health).toBe(200);
  });

  it('loads everything but model-gateway/redis and /postgres without the optional peers installed', async () => {
    const peer = `new RegExp(${JSON.stringify('^(ioredis|express|fastify|next|postgres|better-sqlite3)(/|$)')})`;
    await writeFile(
      join(app, 'block-peers.mjs'),
      [
        `import { register } from 'node:module';`,
        `const hook = 'export async function resolve(s, c, next) { if (${peer}.test(s)) throw new Error("optional peer loaded: " + s); return next(s, c); }';`,
        `register('data:text/javascript,' + encodeURIComponent(hook));`,
      ].join('\n'),
    );
    await writeFile(
      join(app, 'block-peers.cjs'),
      [
        `const Module = require('node:module');`,
        `const resolve = Module._resolveFilename;`,
        `Module._resolveFilename = function (s, ...rest) { if (${peer}.test(s)) throw new Error('optional peer loaded: ' + s); return resolve.call(this, s, ...rest); };`,
      ].join('\n'),
    );
    const light = SUBPATHS.filter((s) => s !== 'model-gateway/redis' && s !== 'model-gateway/postgres');
    // createStores loads a driver's module only for that driver: memory stores need no peer.
    const memory = `.createStores({ driver: 'memory' }).then((s) => s.close())`;
    await writeFile(join(app, 'light.mjs'), [...light.map((s) => `await import('${s}');`), `await (await import('model-gateway'))${memory};`].join('\n'));
    await writeFile(join(app, 'light.cjs'), [...light.map((s) => `require('${s}');`), `require('model-gateway')${memory};`].join('\n'));
    await run(process.execPath, ['--import', './block-peers.mjs', 'light.mjs'], { cwd: app });
    await run(process.execPath, ['--require', './block-peers.cjs', 'light.cjs'], { cwd: app });
    const bin = join('node_modules', 'model-gateway', 'dist', 'cli.js');
    expect(await run(process.execPath, ['--import', './block-peers.mjs', bin, '--help'], { cwd: app })).toMatch(/model-gateway serve/);
    // The blocking works: the Redis and PostgreSQL subpaths do need their peers.
    await writeFile(join(app, 'redis.mjs'), `await import('model-gateway/redis');`);
    await expect(run(process.execPath, ['--import', './block-peers.mjs', 'redis.mjs'], { cwd: app })).rejects.toThrow(/optional peer loaded: ioredis/);
    await writeFile(join(app, 'postgres.mjs'), `await import('model-gateway/postgres');`);
    await expect(run(process.execPath, ['--import', './block-peers.mjs', 'postgres.mjs'], { cwd: app })).rejects.toThrow(/optional peer loaded: postgres/);
    // SQLite storage without better-sqlite3 fails with an error that says what to install.
    await writeFile(
      join(app, 'sqlite.cjs'),
      `require('model-gateway').createGateway({ storage: { driver: 'sqlite', path: 'x.db' } });`,
    );
    await expect(run(process.execPath, ['--require', './block-peers.cjs', 'sqlite.cjs'], { cwd: app })).rejects.toThrow(
      /storage driver "sqlite" needs the better-sqlite3 package/,
    );
  });

  it('runs the bin', async () => {
    const bin = join(app, 'node_modules', 'model-gateway', 'dist', 'cli.js');
    expect((await stat(bin)).mode & 0o111).not.toBe(0);
    expect(await run(bin, ['--help'], { cwd: app })).toMatch(/model-gateway serve --config FILE/);
  });

  it('the bin answers a Redis outage with 503 service_unavailable (not 500), and /ready names the storage', async () => {
    // The bin is one bundle that loads the Redis stores from dist/redis.js: the stores' error
    // class and the one the gateway checks are two copies, which must still match.
    const bin = join(app, 'node_modules', 'model-gateway', 'dist', 'cli.js');
    const config = await writeConfig({ storage: { driver: 'redis', url: `redis://127.0.0.1:${await freePort()}`, keyPrefix: 'mgpkg:' } });
    const server = await spawnServer(process.execPath, [bin, 'serve', '--config', config, '--port', '0'], {
      ready: /listening on (http:\/\/\S+)\/v1/,
      timeoutMs: 30_000,
    });
    try {
      const origin = server.match[1]!;
      const res = await fetch(`${origin}/v1/models`, { headers: { authorization: `Bearer sk-mg-${'A'.repeat(44)}` } });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(((await res.json()) as { error: unknown }).error).toMatchObject({ code: 'service_unavailable', type: 'service_unavailable' });
      const ready = await fetch(`${origin}/ready`);
      expect(ready.status).toBe(503);
      const body = (await ready.json()) as { error: { message: string; metadata: { checks: Record<string, string> } } };
      expect(body.error.message).toMatch(/storage/);
      expect(body.error.metadata.checks).toMatchObject({ startup: 'ok', storage: 'unavailable' });
      const head = await fetch(`${origin}/ready`, { method: 'HEAD' });
      expect(head.status).toBe(503);
      expect(await head.text()).toBe('');
      expect((await fetch(`${origin}/health`)).status).toBe(200);
      expect(server.output()).not.toMatch(/unexpected error|internal_error/);
    } finally {
      await server.stop();
    }
  });

  it('type-checks from a NodeNext TypeScript project, in ESM and CJS', async () => {
    await writeFile(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          lib: ['es2023', 'dom'],
          strict: true,
          noEmit: true,
          esModuleInterop: true,
          // The package's declarations are checked too: they name no global newer than these
          // libs (the server adapter's own typings, which need DisposableStack and URLPattern,
          // stay out of them).
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [join(dir, 'node_modules', '@types')],
        },
        files: ['types.mts', 'types.cts'],
      }),
    );
    const body = [
      `const gateway = createGateway({ limits: { maxBodyBytes: 1024 } });`,
      `const middleware: (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, next: (e?: unknown) => void) => void = toExpress(gateway);`,
      `const plugin = toFastify(gateway);`,
      `express().use('/api', toExpress(gateway));`,
      `void Fastify().register(plugin, { prefix: '/api' });`,
      `const { GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS } = toNext(() => gateway, { basePath: '/api', clientAddress: lastForwardedFor });`,
      `const fetchHandler: (r: Request, s: { requestIP(r: Request): { address: string } | null }) => Promise<Response> = toBun(gateway);`,
      `const stores: typeof createRedisStores = createRedisStores;`,
      `const durable: [typeof createSqliteStores, typeof createPostgresStores] = [createSqliteStores, createPostgresStores];`,
      `const built: Promise<Stores> = createStores({ driver: 'postgres', url: 'postgres://db/gw', limits: { driver: 'redis' } });`,
      `// @ts-expect-error the storage section is typed: no such driver`,
      `void createStores({ driver: 'mysql' });`,
      // Proves the types are real (not any): an unused @ts-expect-error is itself an error.
      `// @ts-expect-error clientAddress is required`,
      `toNext(gateway, { basePath: '/api' });`,
      `export { middleware, plugin, GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, fetchHandler, stores, durable, built };`,
    ];
    const imports = [
      `import express from 'express';`,
      `import Fastify from 'fastify';`,
      `import { createGateway, createStores, type Stores } from 'model-gateway';`,
      `import { toExpress } from 'model-gateway/express';`,
      `import { toFastify } from 'model-gateway/fastify';`,
      `import { toNext, lastForwardedFor } from 'model-gateway/next';`,
      `import { toBun } from 'model-gateway/bun';`,
      `import { createRedisStores } from 'model-gateway/redis';`,
      `import { createSqliteStores } from 'model-gateway/sqlite';`,
      `import { createPostgresStores } from 'model-gateway/postgres';`,
    ];
    await writeFile(join(app, 'types.mts'), [...imports, ...body].join('\n'));
    // The same source as CommonJS: NodeNext resolves it through the "require" conditions.
    await writeFile(join(app, 'types.cts'), [...imports, ...body].join('\n'));
    // Rejects with the compiler's errors.
    await run(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { cwd: app });
  }, 120_000);
});
