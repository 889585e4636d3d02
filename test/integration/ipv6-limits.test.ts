/**
 * The per-IP window and IPv6: one host holds a whole /64 and can rotate through it, so IPv6
 * clients share a window per prefix (`limits.ipv6PrefixLength`, 64 by default), also when
 * they reach the gateway through a trusted proxy's X-Forwarded-For.
 */
import { describe, expect, it } from 'vitest';
import { makeGateway, testConfig } from '../helpers/gateway.js';

describe('per-IP limit over IPv6', () => {
  it('ten addresses of one /64 behind a trusted proxy share one window; another /64 has its own', async () => {
    const setup = testConfig({ limits: { ipRequestsPerMinute: 5 } });
    const { gateway, stores } = await makeGateway({ ...setup.options, trustProxy: ['127.0.0.1'] });
    try {
      const get = async (client: string) =>
        (
          await gateway.fetch(
            new Request('http://gw.test/v1/models', { headers: { authorization: `Bearer ${setup.devKey}`, 'x-forwarded-for': client } }),
            { clientAddress: '127.0.0.1' },
          )
        ).status;
      const statuses: number[] = [];
      for (let i = 1; i <= 10; i++) statuses.push(await get(`2001:db8:1:2::${i.toString(16)}`));
      expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429, 429, 429]);
      expect(await get('2001:db8:1:3::1')).toBe(200);
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });

  it('limits.ipv6PrefixLength: 128 counts each address alone; IPv4-mapped IPv6 is its IPv4 address', async () => {
    const setup = testConfig({ limits: { ipRequestsPerMinute: 2, ipv6PrefixLength: 128 } });
    const { gateway, stores } = await makeGateway({ ...setup.options, trustProxy: ['127.0.0.1'] });
    try {
      const get = async (client: string) =>
        (
          await gateway.fetch(
            new Request('http://gw.test/v1/models', { headers: { authorization: `Bearer ${setup.devKey}`, 'x-forwarded-for': client } }),
            { clientAddress: '127.0.0.1' },
          )
        ).status;
      for (let i = 1; i <= 4; i++) expect(await get(`2001:db8:1:2::${i}`)).toBe(200);
      expect(await get('203.0.113.9')).toBe(200);
      expect(await get('::ffff:203.0.113.9')).toBe(200);
      expect(await get('::ffff:cb00:7109')).toBe(429);
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });
});
