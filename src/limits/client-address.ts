import { isIPv4, isIPv6 } from 'node:net';

/**
 * The client's address for per-IP limits: the socket peer, unless the peer
 * is a trusted proxy, in which case X-Forwarded-For is walked right to left past trusted hops.
 * Trust entries are parsed once, here, into integer networks and masks, so a lookup is a few
 * integer comparisons.
 */

type Address = { family: 4; value: number } | { family: 6; value: bigint };

interface Network4 {
  network: number;
  mask: number;
}
interface Network6 {
  network: bigint;
  mask: bigint;
}

const ALL_128 = (1n << 128n) - 1n;
/** Longest address text worth parsing; also caps a malformed hop reported as the client. */
const MAX_ENTRY = 64;

export function createAddressResolver(trustProxy: string[]): (peer: string, xForwardedFor: string | null) => string {
  const v4: Network4[] = [];
  const v6: Network6[] = [];
  for (const entry of trustProxy) {
    const net = parseNetwork(entry);
    if (net.family === 4) v4.push(net);
    else v6.push(net);
  }

  function trusted(addr: Address): boolean {
    if (addr.family === 6) return v6.some((n) => (addr.value & n.mask) === n.network);
    if (v4.some((n) => ((addr.value & n.mask) >>> 0) === n.network)) return true;
    // An IPv6 entry may cover the IPv4-mapped range (e.g. "::/0"); IPv4 was normalised out of it.
    if (v6.length === 0) return false;
    const mapped = (0xffffn << 32n) | BigInt(addr.value);
    return v6.some((n) => (mapped & n.mask) === n.network);
  }

  // The same few peers (clients, or the proxy in front) come back on every request: their
  // canonical form and trust are computed once. Bounded: cleared when it grows large.
  const peers = new Map<string, { addr: Address; text: string; trusted: boolean } | null>();
  const peerInfo = (peer: string) => {
    let info = peers.get(peer);
    if (info === undefined) {
      const addr = parseAddress(peer);
      info = addr ? { addr, text: formatAddress(addr), trusted: trusted(addr) } : null;
      if (peers.size >= 10_000) peers.clear();
      peers.set(peer, info);
    }
    return info;
  };

  return (peer, xForwardedFor) => {
    const info = peerInfo(peer);
    if (!info) return peer; // nothing we can trust; the raw peer is all we have
    if (!info.trusted || xForwardedFor === null) return info.text;
    const peerAddr = info.addr;

    const hops = xForwardedFor
      .split(',')
      .map((hop) => hop.trim())
      .filter((hop) => hop !== '');
    let leftmost = peerAddr;
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hops[i] as string;
      const addr = parseAddress(hop);
      // A malformed hop was written by whoever stands behind the last trusted proxy: it is the
      // client as far as we can tell, and nothing left of it can be believed.
      if (!addr) return hop.slice(0, MAX_ENTRY);
      if (!trusted(addr)) return formatAddress(addr);
      leftmost = addr;
    }
    return formatAddress(leftmost);
  };
}

/**
 * The per-IP rate bucket of a client address (as the resolver returns it). One IPv6 host
 * usually holds a whole /64 (or more) and can rotate through it at will, so counting each
 * address alone would give it billions of windows: IPv6 clients are grouped by their first
 * `ipv6PrefixLength` bits ("2001:db8:1:2::/64"). IPv4 (and IPv4-mapped IPv6, which the
 * resolver already turned into IPv4) is one address per bucket; text that is no address at
 * all (a malformed forwarded hop) is its own bucket. Cached: the same clients come back.
 */
export function createIpBucket(ipv6PrefixLength: number): (ip: string) => string {
  const mask = (ALL_128 << BigInt(128 - ipv6PrefixLength)) & ALL_128;
  const buckets = new Map<string, string>();
  return (ip) => {
    if (!ip.includes(':') || ipv6PrefixLength === 128) return ip;
    let bucket = buckets.get(ip);
    if (bucket === undefined) {
      const addr = parseAddress(ip);
      if (!addr) bucket = ip;
      else if (addr.family === 4) bucket = formatAddress(addr);
      else bucket = `${formatAddress({ family: 6, value: addr.value & mask })}/${ipv6PrefixLength}`;
      if (buckets.size >= 10_000) buckets.clear();
      buckets.set(ip, bucket);
    }
    return bucket;
  };
}

/** What is wrong with a trustProxy entry (without the option's name), or null when it is a network. */
export function networkProblem(entry: string): string | null {
  try {
    parseNetwork(entry);
    return null;
  } catch (err) {
    return (err as Error).message.replace(/^trustProxy: /, '');
  }
}

/** "10.0.0.0/8", "2001:db8::/32", "::ffff:10.0.0.0/104" or a single address. Throws on bad config. */
function parseNetwork(entry: string): ({ family: 4 } & Network4) | ({ family: 6 } & Network6) {
  const [text = '', prefixText, extra] = entry.trim().split('/');
  const addr = parseAddress(text);
  if (!addr || extra !== undefined || (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText))) {
    throw new Error(`trustProxy: not an IP address or CIDR: ${JSON.stringify(entry)}`);
  }
  let prefix = prefixText === undefined ? undefined : Number(prefixText);
  // An IPv4-mapped IPv6 network was normalised to IPv4 above, so its prefix shifts by 96.
  if (addr.family === 4 && prefix !== undefined && isIPv6(stripBrackets(text))) {
    if (prefix < 96) throw new Error(`trustProxy: IPv4-mapped prefix must be at least 96: ${entry}`);
    prefix -= 96;
  }
  if (addr.family === 4) {
    const bits = prefix ?? 32;
    if (bits > 32) throw new Error(`trustProxy: IPv4 prefix over 32: ${entry}`);
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    return { family: 4, network: (addr.value & mask) >>> 0, mask };
  }
  const bits = prefix ?? 128;
  if (bits > 128) throw new Error(`trustProxy: IPv6 prefix over 128: ${entry}`);
  const mask = (ALL_128 << BigInt(128 - bits)) & ALL_128;
  return { family: 6, network: addr.value & mask, mask };
}

function stripBrackets(text: string): string {
  return text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
}

/**
 * Parses "1.2.3.4", "1.2.3.4:5678", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443" and
 * "fe80::1%eth0" (the zone is dropped). IPv4-mapped IPv6 becomes IPv4. Anything else: null.
 */
function parseAddress(raw: string): Address | null {
  let text = raw.trim();
  if (text.length === 0 || text.length > MAX_ENTRY) return null;
  const bracketed = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(text);
  if (bracketed) text = bracketed[1] as string;
  else if (/^[\d.]+:\d{1,5}$/.test(text)) text = text.slice(0, text.indexOf(':'));
  const zone = text.indexOf('%');
  if (zone !== -1) text = text.slice(0, zone);

  if (isIPv4(text)) return { family: 4, value: parseIPv4(text) };
  if (!isIPv6(text)) return null;
  const value = parseIPv6(text);
  // ::ffff:a.b.c.d is an IPv4 client reaching a dual-stack socket.
  if (value >> 32n === 0xffffn) return { family: 4, value: Number(value & 0xffffffffn) };
  return { family: 6, value };
}

function parseIPv4(text: string): number {
  return text.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0);
}

/** Assumes `text` passed isIPv6 (no zone). */
function parseIPv6(text: string): bigint {
  const groups = (part: string): number[] => {
    if (part === '') return [];
    return part.split(':').flatMap((g) => {
      if (!g.includes('.')) return [parseInt(g, 16)];
      const v4 = parseIPv4(g); // an embedded IPv4 tail fills the last two groups
      return [Math.floor(v4 / 0x10000), v4 % 0x10000];
    });
  };
  const gap = text.indexOf('::');
  const head = groups(gap === -1 ? text : text.slice(0, gap));
  const tail = gap === -1 ? [] : groups(text.slice(gap + 2));
  const all = [...head, ...Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  return all.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
}

/** Canonical text (RFC 5952 for IPv6), so one client always lands in one rate bucket. */
function formatAddress(addr: Address): string {
  if (addr.family === 4) {
    const v = addr.value;
    return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
  }
  const groups = Array.from({ length: 8 }, (_, i) => Number((addr.value >> BigInt(112 - 16 * i)) & 0xffffn));
  // The longest run of two or more zero groups (the first on a tie) becomes "::".
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) [bestStart, bestLen] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}
