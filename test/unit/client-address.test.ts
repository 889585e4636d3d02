import { describe, expect, it } from 'vitest';
import { createAddressResolver, createIpBucket } from '../../src/limits/client-address.js';

describe('createAddressResolver', () => {
  it('without trusted proxies returns the peer and ignores the header', () => {
    const resolve = createAddressResolver([]);
    expect(resolve('203.0.113.7', '198.51.100.1')).toBe('203.0.113.7');
    expect(resolve('203.0.113.7', null)).toBe('203.0.113.7');
  });

  it('ignores the header from an untrusted peer', () => {
    const resolve = createAddressResolver(['10.0.0.0/8']);
    expect(resolve('203.0.113.7', '198.51.100.1, 10.0.0.2')).toBe('203.0.113.7');
  });

  it('takes the rightmost untrusted hop behind trusted proxies', () => {
    const resolve = createAddressResolver(['10.0.0.0/8', '192.168.1.5']);
    // The client may prepend anything; only what trusted proxies appended is believed.
    expect(resolve('10.0.0.1', '1.1.1.1, 198.51.100.9, 192.168.1.5, 10.9.9.9')).toBe('198.51.100.9');
    expect(resolve('192.168.1.5', '198.51.100.9')).toBe('198.51.100.9');
    expect(resolve('10.0.0.1', null)).toBe('10.0.0.1');
    expect(resolve('10.0.0.1', '')).toBe('10.0.0.1');
  });

  it('returns the leftmost hop when every hop is trusted', () => {
    const resolve = createAddressResolver(['10.0.0.0/8']);
    expect(resolve('10.0.0.1', '10.1.1.1, 10.2.2.2')).toBe('10.1.1.1');
  });

  it('treats a malformed hop as the client and stops there', () => {
    const resolve = createAddressResolver(['10.0.0.0/8']);
    expect(resolve('10.0.0.1', '198.51.100.9, unknown, 10.0.0.2')).toBe('unknown');
    expect(resolve('10.0.0.1', '198.51.100.9, 999.1.1.1')).toBe('999.1.1.1');
    expect(resolve('10.0.0.1', '1.1.1.1, ' + 'x'.repeat(500))).toBe('x'.repeat(64));
    // A well-formed untrusted hop to the right of garbage wins before the garbage is reached.
    expect(resolve('10.0.0.1', 'garbage, 198.51.100.9')).toBe('198.51.100.9');
  });

  it('skips empty list entries', () => {
    const resolve = createAddressResolver(['10.0.0.0/8']);
    expect(resolve('10.0.0.1', '198.51.100.9, , 10.0.0.3,')).toBe('198.51.100.9');
  });

  it('normalises IPv4-mapped IPv6 peers, hops and trust entries', () => {
    const resolve = createAddressResolver(['127.0.0.1', '::ffff:10.0.0.0/104']);
    expect(resolve('::ffff:127.0.0.1', '::ffff:198.51.100.9')).toBe('198.51.100.9');
    expect(resolve('::FFFF:10.1.2.3', '198.51.100.9')).toBe('198.51.100.9');
    expect(resolve('::ffff:203.0.113.7', '198.51.100.9')).toBe('203.0.113.7');
  });

  it('matches IPv6 addresses and CIDRs, canonicalising the result', () => {
    const resolve = createAddressResolver(['2001:db8::/32', '::1']);
    expect(resolve('::1', '2001:0DB8:0:0:0:0:0:0002, 2001:db8:ffff::1')).toBe('2001:db8::2');
    expect(resolve('2001:db8:1::1', '2a00:1450:4001:0:0:0:0:200e')).toBe('2a00:1450:4001::200e');
    expect(resolve('2001:db9::1', '2a00:1450::1')).toBe('2001:db9::1');
    expect(resolve('2001:db8::5', '1:0:0:2:0:0:0:3')).toBe('1:0:0:2::3');
  });

  it('accepts bracketed IPv6, ports and zone ids in hops', () => {
    const resolve = createAddressResolver(['10.0.0.0/8', 'fe80::/10']);
    expect(resolve('10.0.0.1', '[2001:db8::7]:443')).toBe('2001:db8::7');
    expect(resolve('10.0.0.1', '[2001:db8::7]')).toBe('2001:db8::7');
    expect(resolve('10.0.0.1', '198.51.100.9:5678')).toBe('198.51.100.9');
    expect(resolve('fe80::1%eth0', '198.51.100.9')).toBe('198.51.100.9');
  });

  it('an IPv6 catch-all also covers IPv4-mapped peers', () => {
    const resolve = createAddressResolver(['::/0']);
    expect(resolve('::ffff:10.0.0.1', '198.51.100.9')).toBe('198.51.100.9');
    expect(resolve('2001:db8::1', '198.51.100.9')).toBe('198.51.100.9');
  });

  it('honours prefix boundaries exactly', () => {
    const resolve = createAddressResolver(['192.168.0.0/23', '0.0.0.0/32']);
    expect(resolve('192.168.1.255', '198.51.100.9')).toBe('198.51.100.9');
    expect(resolve('192.168.2.0', '198.51.100.9')).toBe('192.168.2.0');
    expect(resolve('192.167.255.255', '198.51.100.9')).toBe('192.167.255.255');
    const everyone = createAddressResolver(['0.0.0.0/0']);
    expect(everyone('203.0.113.7', '198.51.100.9, 203.0.113.8')).toBe('198.51.100.9');
  });

  it('masks host bits in a trust entry', () => {
    const resolve = createAddressResolver(['10.1.2.3/8']);
    expect(resolve('10.200.0.1', '198.51.100.9')).toBe('198.51.100.9');
  });

  it('returns an unparseable peer untouched', () => {
    const resolve = createAddressResolver(['0.0.0.0/0']);
    expect(resolve('', '198.51.100.9')).toBe('');
    expect(resolve('not-an-ip', '198.51.100.9')).toBe('not-an-ip');
  });

  it('rejects a bad trustProxy entry at creation', () => {
    for (const bad of ['10.0.0.0/33', '2001:db8::/129', 'localhost', '10.0.0.0/8/1', '10.0.0.0/x', '::ffff:10.0.0.0/64']) {
      expect(() => createAddressResolver([bad]), bad).toThrow(/trustProxy/);
    }
  });
});

describe('createIpBucket', () => {
  it('groups IPv6 clients by their prefix; IPv4 and IPv4-mapped IPv6 are one address each', () => {
    const bucket = createIpBucket(64);
    const same = ['2001:db8:1:2::1', '2001:db8:1:2::a', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:DB8:1:2:0:0:0:7'];
    for (const ip of same) expect(bucket(ip)).toBe('2001:db8:1:2::/64');
    expect(bucket('2001:db8:1:3::1')).toBe('2001:db8:1:3::/64');
    expect(bucket('203.0.113.7')).toBe('203.0.113.7');
    expect(bucket('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(bucket('unknown')).toBe('unknown');
    expect(createIpBucket(48)('2001:db8:1:2::1')).toBe('2001:db8:1::/48');
    expect(createIpBucket(128)('2001:db8:1:2::1')).toBe('2001:db8:1:2::1');
  });
});
