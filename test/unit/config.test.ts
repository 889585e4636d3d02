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
    await expect(loadConfigFile(file({ keys: [{ key: 'x${K}' }] }), { K: '' })).rejects.toThrow('keys.0.key: environment variable K is empty');
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
      [{ driver: 'redis', cluster: ['10.0.0.7:7000'] }, /storage\.cluster\.0: must be a Redis URL/],
      [{ driver: 'redis', sentinels: ['redis://a:26379'], name: 'm', password: '' }, /storage\.password: must not be empty/],
      [{ driver: 'redis', url: 'redis://a:1', name: 'm' }, /storage\.name: only used with sentinels/],
      [{ driver: 'redis', keyPrefix: 'mg{x}:' }, /storage\.keyPrefix: must not contain/],
    ];
    for (const [storage, message] of bad) expect(() => parseOptions({ storage }), JSON.stringify(storage)).toThrow(message);
  });
});
