/**
 * The config file and its schema: "${NAME}" substituted anywhere inside a string, unset and
 * empty variables refused with the field's path, empty secrets refused, and the Redis storage
 * shapes (one URL, a Cluster, Sentinel) checked before anything connects.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../src/cli/config-file.js';
import { ConfigError, parseOptions } from '../../src/options.js';

function file(config: unknown): string {
  const path = join(mkdtempSync(join(tmpdir(), 'mg-config-test-')), 'gateway.config.json');
  writeFileSync(path, JSON.stringify(config));
  return path;
}

const upstream = (apiKey: unknown) => ({ upstreams: { openai: { baseUrl: 'https://api.example.com/v1', apiKey } } });

describe('environment variables in a config file', () => {
  it('replaces ${NAME} inside strings, several per string, and leaves $${NAME} as the literal text', async () => {
    const config = await loadConfigFile(
      file({
        serviceName: 'svc-${REGION}-${STAGE}',
        upstreams: { a: { baseUrl: 'https://${HOST}/v1', apiKey: '${TOKEN}' } },
        documents: [{ id: 'd', account: 'x', text: 'Templates look like $${name}; ${not a name} and $HOME stay.' }],
        limits: { keyRequestsPerMinute: 5 },
      }),
      { REGION: 'eu', STAGE: 'prod', HOST: 'api.example.com', TOKEN: 'Bearer-less-secret' },
    );
    expect(config).toEqual({
      serviceName: 'svc-eu-prod',
      upstreams: { a: { baseUrl: 'https://api.example.com/v1', apiKey: 'Bearer-less-secret' } },
      documents: [{ id: 'd', account: 'x', text: 'Templates look like ${name}; ${not a name} and $HOME stay.' }],
      limits: { keyRequestsPerMinute: 5 },
    });
    expect(await loadConfigFile(file({ serviceName: 'Bearer ${TOKEN}' }), { TOKEN: 't0k' })).toEqual({ serviceName: 'Bearer t0k' });
  });

  it('an unset variable is an error naming the field and the variable', async () => {
    const err = await loadConfigFile(file(upstream('Bearer ${OPENAI_KEY}')), {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/^upstreams\.openai\.apiKey: environment variable OPENAI_KEY is not set/);
  });

  it('an empty variable is an error, not a missing Authorization header', async () => {
    const err = await loadConfigFile(file(upstream('${OPENAI_KEY}')), { OPENAI_KEY: '' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toBe('upstreams.openai.apiKey: environment variable OPENAI_KEY is empty');
    await expect(loadConfigFile(file({ keys: [{ key: 'x${K}' }] }), { K: '' })).rejects.toThrow('keys[0].key: environment variable K is empty');
  });
});

describe('the schema', () => {
  it('refuses an empty apiKey and accepts one left out', () => {
    expect(() => parseOptions(upstream(''))).toThrow(/upstreams\.openai\.apiKey: must not be empty/);
    expect(parseOptions({ upstreams: { local: { baseUrl: 'http://127.0.0.1:11434/v1' } } }).upstreams.local).toMatchObject({ apiKey: '' });
  });

  it('takes one Redis URL, a Cluster or Sentinel, and names what is wrong', () => {
    expect(parseOptions({ storage: { driver: 'redis' } }).storage).toEqual({ driver: 'redis', keyPrefix: 'mg:' });
    expect(parseOptions({ storage: { driver: 'redis', cluster: ['redis://10.0.0.7:7000', 'rediss://10.0.0.8:7000'] } }).storage).toMatchObject({
      cluster: ['redis://10.0.0.7:7000', 'rediss://10.0.0.8:7000'],
    });
    expect(parseOptions({ storage: { driver: 'redis', sentinels: ['redis://10.0.0.7:26379'], name: 'mymaster', password: 's3cret' } }).storage).toMatchObject({
      name: 'mymaster',
    });
    const bad: [unknown, RegExp][] = [
      [{ driver: 'redis', url: 'redis://a:1', cluster: ['redis://b:2'] }, /storage\.cluster: give one of url, cluster or sentinels/],
      [{ driver: 'redis', sentinels: ['redis://a:26379'] }, /storage\.name: sentinels need the name/],
      [{ driver: 'redis', cluster: [] }, /storage\.cluster/],
      [{ driver: 'redis', cluster: ['10.0.0.7:7000'] }, /storage\.cluster\[0\]: must be a Redis URL/],
      [{ driver: 'redis', sentinels: ['redis://a:26379'], name: 'm', password: '' }, /storage\.password: must not be empty/],
      [{ driver: 'redis', url: 'redis://a:1', name: 'm' }, /storage\.name: only used with sentinels/],
      [{ driver: 'redis', keyPrefix: 'mg{x}:' }, /storage\.keyPrefix: must not contain/],
    ];
    for (const [storage, message] of bad) expect(() => parseOptions({ storage }), JSON.stringify(storage)).toThrow(message);
  });
});

describe('config errors a person can act on', () => {
  const problems = (input: unknown): string[] => {
    try {
      parseOptions(input);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as Error).message.split('\n').slice(1).map((l) => l.trim());
    }
    throw new Error('the options were accepted');
  };
  const sim = { upstreams: { sim: { simulate: true } } };

  it('names the field in JS notation and says what was expected and what was given', () => {
    const model = { id: 'm', upstream: 'sim', pricing: { prompt: 1.5e-7, completion: '0.000001' } };
    expect(problems({ ...sim, models: [model] })).toEqual(['models[0].pricing.prompt: expected a decimal string such as "0.000001", got the number 1.5e-7']);
    expect(problems({ ...sim, models: [{ ...model, pricing: { prompt: '0.0000001', completion: '1e-6' } }] })).toEqual([
      'models[0].pricing.completion: must be a USD decimal string with at most 12 decimal places, e.g. "0.000000075"; got the string "1e-6"',
    ]);
    expect(problems({ limits: { keyRequestsPerMinute: 0 }, accounts: [{ id: '' }] })).toEqual([
      'accounts[0].id: must not be empty',
      'limits.keyRequestsPerMinute: must be more than 0, got the number 0',
    ]);
    expect(problems({ upstreams: { 'my-upstream': { baseUrl: 'ftp://files.example.com' } } })).toEqual([
      'upstreams["my-upstream"].baseUrl: expected an http or https URL such as "https://api.example.com/v1", got the string "ftp://files.example.com"',
    ]);
    expect(problems({ storage: { driver: 'postgres' } })).toEqual(['storage.url: missing; expected a string']);
  });

  it('suggests the known key or option nearest to a typo', () => {
    expect(problems({ limts: { keyRequestsPerMinute: 5 } })).toEqual(['(root): "limts" is not a known key; did you mean "limits"?']);
    expect(problems({ limits: { maxbodybytes: 10 } })).toEqual(['limits: "maxbodybytes" is not a known key; did you mean "maxBodyBytes"?']);
    // The storage's keys are those of the driver it names.
    expect(problems({ storage: { driver: 'sqlite', pth: './x.db' } })).toEqual(['storage: "pth" is not a known key; did you mean "path"?']);
    expect(problems({ storage: { driver: 'postgress' } })).toEqual([
      'storage.driver: expected one of "memory", "sqlite", "postgres", "redis", got the string "postgress"; did you mean "postgres"?',
    ]);
    expect(problems({ logLevel: 'inf' })).toEqual([
      'logLevel: expected one of "fatal", "error", "warn", "info", "debug", "trace", "silent", got the string "inf"; did you mean "info"?',
    ]);
    // Nothing near: no suggestion.
    expect(problems({ colour: 'blue' })).toEqual(['(root): "colour" is not a known key']);
  });

  it('a config file names the field of an unset variable in the same notation', async () => {
    const err = await loadConfigFile(file({ upstreams: { 'eu-1': { baseUrl: 'https://x/v1', headers: { 'api-key': ['${K}'] } } } }), {}).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/^upstreams\["eu-1"\]\.headers\["api-key"\]\[0\]: environment variable K is not set/);
  });
});

describe('names that break things', () => {
  const problems = (input: unknown): string[] => {
    try {
      parseOptions(input);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as Error).message.split('\n').slice(1).map((l) => l.trim());
    }
    throw new Error('the options were accepted');
  };
  const sim = { upstreams: { sim: { simulate: true } } };
  const model = (upstream: string) => ({ id: 'm', upstream, pricing: { prompt: '0.000001', completion: '0.000001' } });

  it('account, brand and document ids "." and "..", or outside the format, name the field', () => {
    for (const id of ['.', '..', 'a/b', 'a b', 'a\u0000b', 'a:b']) {
      expect(problems({ accounts: [{ id }] })).toEqual([expect.stringMatching(/^accounts\[0\]\.id: must be letters, digits/)]);
      expect(problems({ accounts: [{ id: 'a' }], brands: [{ id, account: 'a', voice: 'v' }] })).toEqual([expect.stringMatching(/^brands\[0\]\.id: /)]);
      expect(problems({ accounts: [{ id: 'a' }], documents: [{ id, account: 'a', text: 't' }] })).toEqual([expect.stringMatching(/^documents\[0\]\.id: /)]);
    }
    expect(problems({ accounts: [{ id: 'x'.repeat(65) }] })).toEqual(['accounts[0].id: must have at most 64 characters']);
    expect(parseOptions({ accounts: [{ id: 'a.b-c_D9' }] }).accounts[0]!.id).toBe('a.b-c_D9');
  });

  it('a seeded key the gateway could never read (over 200 letters or digits) names the field; 200 is taken', () => {
    const key = (n: number) => `sk-mg-${'a'.repeat(n)}`;
    expect(problems({ accounts: [{ id: 'a' }], keys: [{ key: key(201), account: 'a' }] })).toEqual([expect.stringMatching(/^keys\[0\]\.key: must look like "sk-mg-" followed by 40 to 200/)]);
    expect(parseOptions({ accounts: [{ id: 'a' }], keys: [{ key: key(200), account: 'a' }] }).keys).toHaveLength(1);
  });

  it('an account id given twice, or a brand or document id twice in one account, names the second', () => {
    expect(problems({ accounts: [{ id: 'a' }, { id: 'b' }, { id: 'a' }] })).toEqual(['accounts[2].id: duplicate account id "a"']);
    const brand = (id: string, account: string) => ({ id, account, voice: 'v' });
    expect(problems({ accounts: [{ id: 'a' }, { id: 'b' }], brands: [brand('x', 'a'), brand('x', 'b'), brand('x', 'a')] })).toEqual([
      'brands[2].id: duplicate id "x" in account "a"',
    ]);
    const doc = (id: string) => ({ id, account: 'a', text: 't' });
    expect(problems({ accounts: [{ id: 'a' }], documents: [doc('d'), doc('d')] })).toEqual(['documents[1].id: duplicate id "d" in account "a"']);
  });

  it('a retiresAt that is no calendar date names the field (it would never retire, or retire a month late)', () => {
    const retiring = (retiresAt: string) => ({ ...sim, models: [{ ...model('sim'), posture: 'Deprecated', retiresAt }] });
    for (const date of ['2020-13-01', '2025-02-30', '2026-04-31', '2026-00-10']) {
      expect(problems(retiring(date)), date).toEqual([`models[0].retiresAt: must be a calendar date "YYYY-MM-DD"; got the string "${date}"`]);
    }
    expect(() => parseOptions(retiring('2024-02-29'))).not.toThrow();
    expect(problems(retiring('2026-6-1'))[0]).toMatch(/^models\[0\]\.retiresAt: must be a date "YYYY-MM-DD"/);
  });

  it('a model whose upstream is a name every object has, and not a configured upstream, names the field', () => {
    for (const name of ['toString', '__proto__', 'constructor', 'hasOwnProperty', 'nope']) {
      expect(problems({ ...sim, models: [model(name)] })).toEqual([`models[0].upstream: no upstream named "${name}"`]);
      const { upstream: _one, ...targeted } = model('sim');
      expect(problems({ ...sim, models: [{ ...targeted, targets: [{ upstream: name }] }] })).toContain(
        `models[0].targets[0].upstream: no upstream named "${name}"`,
      );
    }
    // Nor may an upstream be named so.
    expect(problems({ upstreams: { toString: { simulate: true } } })).toEqual(['upstreams.toString: is a name every object has; choose another; got the string "toString"']);
    expect(problems(JSON.parse('{"upstreams":{"__proto__":{"simulate":true}}}'))).toEqual(['upstreams["__proto__"]: is a name every object has; choose another']);
  });

  it('a CR, LF or NUL in an upstream header value or apiKey names the field', () => {
    const http = (fields: object) => ({ upstreams: { p: { baseUrl: 'https://api.example.com/v1', ...fields } } });
    for (const bad of ['v\r\nX-Injected: 1', 'v\n', 'v\r', 'v\u0000']) {
      expect(problems(http({ headers: { 'api-key': bad } }))).toEqual([expect.stringMatching(/^upstreams\.p\.headers\["api-key"\]: must not contain a line break/)]);
      expect(problems(http({ apiKey: `sk-${bad}` }))).toEqual([expect.stringMatching(/^upstreams\.p\.apiKey: must not contain a line break/)]);
    }
    expect(parseOptions(http({ apiKey: 'sk-ok', headers: { 'api-key': 'a b\tc' } })).upstreams.p).toMatchObject({ apiKey: 'sk-ok' });
  });

  it('a trustProxy entry that is not a network names its index, as a config error (never a stack trace at start)', () => {
    expect(problems({ trustProxy: ['10.0.0.0/8', '1.2.3', '10.0.0.0/40', '::ffff:10.0.0.0/90'] })).toEqual([
      'trustProxy[1]: not an IP address or CIDR: "1.2.3"',
      'trustProxy[2]: IPv4 prefix over 32: 10.0.0.0/40',
      'trustProxy[3]: IPv4-mapped prefix must be at least 96: ::ffff:10.0.0.0/90',
    ]);
    expect(parseOptions({ trustProxy: ['10.0.0.0/8', '2001:db8::/32', '::ffff:10.0.0.0/104', '127.0.0.1'] }).trustProxy).toHaveLength(4);
  });

  it('never shows a secret it refuses: an upstream key or header, a client key, a URL password', () => {
    const upstreamKey = 'sk-proj-UPSTREAMSECRETabcdefghijklmnopqrstuv0123456789';
    const clientKey = 'sk-mg-CLIENTSECRETabcdefghijklmnopqrstuvwxyz0123-';
    const said = problems({
      upstreams: { p: { baseUrl: 'https://api.example.com/v1', apiKey: `${upstreamKey}\n`, headers: { 'api-key': 'AZURESECRETvalue\n' } } },
      accounts: [{ id: 'acme' }],
      keys: [{ key: clientKey, account: 'acme' }],
      storage: { driver: 'redis', url: 'redis://:Sup3rS3cretRedisPass@127.0.0.1:6379 ' },
    }).join('\n');
    for (const secret of ['UPSTREAMSECRET', 'AZURESECRET', 'CLIENTSECRET', 'Sup3rS3cret']) expect(said).not.toContain(secret);
    // What is wrong is still said: the field, the rule, and what the value looks like.
    expect(said).toContain(`upstreams.p.apiKey: must not contain a line break (CR or LF) or NUL; got a string of ${upstreamKey.length + 1} characters with a line break`);
    expect(said).toContain(`keys[0].key: must look like "sk-mg-" followed by 40 to 200 letters or digits; got a string of ${clientKey.length} characters`);
    expect(said).toContain('redis://:***@127.0.0.1:6379 ');
  });

  it('a metrics.path that shadows /v1, /admin or a probe names the field', () => {
    for (const path of ['/v1', '/v1/chat/completions', '/v1/', '/admin', '/admin/v1/accounts', '/health', '/ready']) {
      expect(problems({ metrics: { path } })).toEqual([expect.stringMatching(new RegExp(`^metrics\\.path: "${path}" would shadow `))]);
    }
    expect(parseOptions({ metrics: { path: '/v1metrics' } }).metrics?.path).toBe('/v1metrics');
    expect(parseOptions({ metrics: { path: '/internal/metrics' } }).metrics?.path).toBe('/internal/metrics');
  });

  it('a settleJournalDir that is a file is a ConfigError naming the field, at start', async () => {
    const { createGateway } = await import('../../src/gateway.js');
    const dir = mkdtempSync(join(tmpdir(), 'mg-journal-file-'));
    const path = join(dir, 'not-a-dir');
    writeFileSync(path, 'x');
    for (const journal of [path, join(path, 'below')]) {
      let thrown: unknown;
      try {
        createGateway({ settleJournalDir: journal });
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(ConfigError);
      expect((thrown as Error).message).toContain(`settleJournalDir: cannot keep the settle journal in "${journal}": it is not a directory`);
    }
  });
});
