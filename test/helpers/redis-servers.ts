/**
 * Private redis-server processes for tests: a single server, a Cluster (masters with one
 * replica each) and a Sentinel-watched primary, each on free loopback ports, keeping nothing
 * on disk. Every process started here is killed by its `stop()`, and by an exit hook as a last
 * resort, so a failing test never leaves a server running.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

export const hasRedisServer = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
export const hasRedisCli = spawnSync('redis-cli', ['--version'], { stdio: 'ignore' }).status === 0;

/** Every live child, so the exit hook can kill what a crashed test left behind. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

/** A port nobody listens on right now (the OS picks it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface RedisProcess {
  port: number;
  url: string;
  child: ChildProcess;
  /** Everything the server wrote, for failure messages. */
  output(): string;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
}

/** A short-lived client that never retries: for setup, probes and assertions. */
export function probeClient(port: number): Redis {
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => null, enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout: 1_000 });
  c.on('error', () => {});
  return c;
}

/** Runs one command on a fresh connection; rejects when the server does not answer. */
export async function command(port: number, name: string, ...args: (string | number)[]): Promise<unknown> {
  const c = probeClient(port);
  try {
    await c.connect();
    return await c.call(name, ...args);
  } finally {
    c.disconnect();
  }
}

export async function until<T>(what: string, fn: () => Promise<T>, ok: (v: T) => boolean, ms = 15_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (ok(v)) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    await sleep(50);
  }
  throw new Error(`${what} did not happen within ${ms} ms (last: ${String(last)})`);
}

/** Starts `bin` with `args` and waits until PING answers on `port`. */
async function startProcess(bin: string, port: number, args: string[]): Promise<RedisProcess> {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  child.stderr!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => live.delete(child));
  const proc: RedisProcess = {
    port,
    url: `redis://127.0.0.1:${port}`,
    child,
    output: () => out,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
  try {
    await until(`${bin} on port ${port} answering PING`, () => command(port, 'PING'), (v) => v === 'PONG', 10_000);
  } catch (err) {
    await proc.kill();
    throw new Error(`${(err as Error).message}\n${out}`);
  }
  return proc;
}

/**
 * No RDB snapshots, no AOF: the test servers keep nothing on disk. A replica's first sync
 * starts at once (the default waits 5 s for more replicas to join it).
 */
const EPHEMERAL = ['--save', '', '--appendonly', 'no', '--repl-diskless-sync-delay', '0'];

/**
 * A server in its own temporary directory (a replica's first sync writes a file there), on
 * `port` (to restart one where it was) or a free one.
 */
export async function startRedisServer(extra: string[] = [], port?: number): Promise<RedisProcess> {
  port ??= await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'mg-redis-'));
  const proc = await startProcess('redis-server', port, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, ...EPHEMERAL, ...extra]);
  const kill = proc.kill;
  proc.kill = async () => {
    await kill();
    rmSync(dir, { recursive: true, force: true });
  };
  return proc;
}

export interface RedisCluster {
  nodes: RedisProcess[];
  /** "redis://127.0.0.1:port" of every node: what `storage.cluster` takes. */
  urls: string[];
  /** The node currently serving `key`'s slot as master. */
  masterOf(key: string): Promise<RedisProcess>;
  /** Waits until every live node says cluster_state:ok and agrees on one master per slot range. */
  healthy(ms?: number): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A Redis Cluster of `masters` masters with one replica each. `nodeTimeoutMs` is how long a
 * master may be silent before its replica takes over (short, so failover tests are quick).
 */
export async function startRedisCluster(opts: { masters?: number; nodeTimeoutMs?: number } = {}): Promise<RedisCluster> {
  const masters = opts.masters ?? 3;
  const dir = mkdtempSync(join(tmpdir(), 'mg-cluster-'));
  const nodes: RedisProcess[] = [];
  const stop = async () => {
    await Promise.all(nodes.map((n) => n.kill()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < masters * 2; i++) {
      const port = await freePort();
      const busPort = await freePort();
      nodes.push(
        await startProcess('redis-server', port, [
          '--port', String(port),
          '--bind', '127.0.0.1',
          '--cluster-enabled', 'yes',
          '--cluster-port', String(busPort),
          '--cluster-config-file', join(dir, `nodes-${port}.conf`),
          '--cluster-node-timeout', String(opts.nodeTimeoutMs ?? 1_000),
          '--dir', dir,
          ...EPHEMERAL,
        ]),
      );
    }
    const created = spawnSync(
      'redis-cli',
      ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '1', '--cluster-yes'],
      { encoding: 'utf8', timeout: 30_000 },
    );
    if (created.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${created.stdout}\n${created.stderr}`);
  } catch (err) {
    await stop();
    throw err;
  }

  const byPort = new Map(nodes.map((n) => [n.port, n]));
  const alive = () => nodes.filter((n) => n.child.exitCode === null && n.child.signalCode === null);
  const cluster: RedisCluster = {
    nodes,
    urls: nodes.map((n) => n.url),
    async masterOf(key) {
      for (const n of alive()) {
        try {
          const slot = Number(await command(n.port, 'CLUSTER', 'KEYSLOT', key));
          const shards = (await command(n.port, 'CLUSTER', 'SLOTS')) as [number, number, [string, number, ...unknown[]], ...unknown[]][];
          const range = shards.find(([from, to]) => slot >= from && slot <= to);
          const owner = range && byPort.get(Number(range[2][1]));
          if (owner) return owner;
        } catch {
          // Ask the next node.
        }
      }
      throw new Error(`no live node knows the master of ${key}`);
    },
    async healthy(ms = 20_000) {
      await until(
        'cluster healthy',
        async () => {
          for (const n of alive()) {
            const info = String(await command(n.port, 'CLUSTER', 'INFO'));
            if (!info.includes('cluster_state:ok')) return false;
            const shards = (await command(n.port, 'CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
            // Every slot range is served by a live master.
            for (const [, , [, port]] of shards) if (!alive().some((x) => x.port === Number(port))) return false;
            if (shards.reduce((sum, [from, to]) => sum + (to - from + 1), 0) !== 16_384) return false;
            // A replica that never synced cannot take over: wait for every link.
            const replication = String(await command(n.port, 'INFO', 'replication'));
            if (replication.includes('role:slave') && !replication.includes('master_link_status:up')) return false;
          }
          return true;
        },
        Boolean,
        ms,
      );
    },
    stop,
  };
  try {
    await cluster.healthy();
  } catch (err) {
    await stop();
    throw err;
  }
  return cluster;
}

export interface RedisSentinels {
  /** The name the sentinels know the primary by. */
  name: string;
  primary: RedisProcess;
  replica: RedisProcess;
  sentinels: RedisProcess[];
  /** "redis://127.0.0.1:port" of every sentinel: what `storage.sentinels` takes. */
  urls: string[];
  /** The port the sentinels currently name as primary. */
  primaryPort(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * A primary, one replica and `count` sentinels (quorum 1, so one live sentinel can fail over),
 * with short timeouts so a failover takes a few seconds.
 */
export async function startRedisSentinels(opts: { count?: number; name?: string } = {}): Promise<RedisSentinels> {
  const name = opts.name ?? 'mgprimary';
  const started: RedisProcess[] = [];
  const dirs: string[] = [];
  const stop = async () => {
    await Promise.all(started.map((p) => p.kill()));
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  };
  try {
    const primary = await startRedisServer();
    started.push(primary);
    const replica = await startRedisServer(['--replicaof', '127.0.0.1', String(primary.port)]);
    started.push(replica);
    await until(
      'replica in sync',
      () => command(replica.port, 'INFO', 'replication'),
      (v) => String(v).includes('master_link_status:up'),
    );
    const sentinels: RedisProcess[] = [];
    for (let i = 0; i < (opts.count ?? 3); i++) {
      const port = await freePort();
      // A sentinel needs a config file it can rewrite; the monitored primary is set with
      // commands after start, so the file starts empty.
      const dir = mkdtempSync(join(tmpdir(), 'mg-sentinel-'));
      dirs.push(dir);
      const file = join(dir, 'sentinel.conf');
      writeFileSync(file, '');
      const s = await startProcess('redis-server', port, [file, '--sentinel', '--port', String(port), '--bind', '127.0.0.1', '--dir', dir]);
      started.push(s);
      sentinels.push(s);
      await command(port, 'SENTINEL', 'MONITOR', name, '127.0.0.1', primary.port, 1);
      await command(port, 'SENTINEL', 'SET', name, 'down-after-milliseconds', 1_000);
      await command(port, 'SENTINEL', 'SET', name, 'failover-timeout', 5_000);
    }
    // Sentinels find each other and the replica through the primary (every 2 s); a failover
    // before they did would need several election rounds.
    for (const s of sentinels) {
      await until(
        `sentinel ${s.port} knows the others and the replica`,
        async () => [
          ((await command(s.port, 'SENTINEL', 'SENTINELS', name)) as unknown[]).length,
          ((await command(s.port, 'SENTINEL', 'REPLICAS', name)) as unknown[]).length,
        ],
        ([others, replicas]) => others === sentinels.length - 1 && replicas === 1,
      );
    }
    const primaryPort = async () => {
      for (const s of sentinels) {
        try {
          const addr = (await command(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as [string, string] | null;
          if (addr) return Number(addr[1]);
        } catch {
          // Ask the next sentinel.
        }
      }
      throw new Error('no sentinel answers');
    };
    return { name, primary, replica, sentinels, urls: sentinels.map((s) => s.url), primaryPort, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
