'use strict';
// Reference implementation of shardcast's wire layout (docs/LAYOUT.md).
//
// Everything a Node.js publisher or subscriber needs to meet shardcast nodes
// on the same Redis: the partition and wire key of a channel (cluster
// engine), the instance of a channel (sharded engine), the hash slot of a
// key, the envelope frame, and both layout fingerprints. Checked against
// testdata/layout_vectors.json by test_vectors.js.
//
// xxhash-wasm loads asynchronously: `await layout.ready` once before using
// anything else. Channels, prefixes and keys may be strings (encoded as
// UTF-8) or Buffers; keys and frames are returned as Buffers. 64-bit values
// (hashes, jump keys, microsecond times) are BigInts.

const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const loadXXHash = require('xxhash-wasm');

const PARTITION_COUNTS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
const SLOT_COUNT = 16384;
const TAGS_DIR = process.env.SHARDCAST_TAGS_DIR || path.join(__dirname, '..', '..', 'docs', 'tags');
const MASK64 = (1n << 64n) - 1n;

let hasher = null;
const ready = loadXXHash().then((h) => { hasher = h; });

// A lone surrogate has no UTF-8: Buffer.from would write U+FFFD for it, so
// that "\ud800", "\udc00" and "\ufffd" would all be one channel.
const LONE_SURROGATE = /\p{Cs}/u;
const bytes = (s) => {
  if (typeof s !== 'string') return Buffer.from(s);
  if (LONE_SURROGATE.test(s)) throw new TypeError('string has a lone surrogate: it has no UTF-8 encoding');
  return Buffer.from(s, 'utf8');
};

/** XXH64 of data with seed 0, as a BigInt. */
function xxh64(data) {
  if (!hasher) throw new Error('shardcast_layout: await ready before hashing');
  return hasher.h64Raw(bytes(data), 0n);
}

/** Jump consistent hash (Lamping and Veach) of a 64-bit BigInt key. */
function jump(key, buckets) {
  if (buckets <= 1) return 0;
  const n = Math.min(buckets, 2147483647);
  let b = -1;
  let j = 0;
  let k = BigInt(key) & MASK64;
  while (j < n) {
    b = j;
    k = (k * 2862933555777941757n + 1n) & MASK64;
    // Two float64 operations, in this order, then truncation; the operands
    // are below 2^32, so Number holds them exactly.
    j = Math.trunc((b + 1) * (2147483648 / (Number(k >> 33n) + 1)));
  }
  return b;
}

/** Index in the ordered address list of the sharded engine's instance. */
function instance(channel, instances) {
  return jump(xxh64(channel), instances);
}

const CRC_TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let b = 0; b < 8; b++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  CRC_TABLE[i] = crc;
}

/** CRC-16/XMODEM: polynomial 0x1021, initial 0, no reflection. */
function crc16(data) {
  let crc = 0;
  for (const byte of bytes(data)) crc = ((crc << 8) & 0xffff) ^ CRC_TABLE[(crc >> 8) ^ byte];
  return crc;
}

/** Redis Cluster hash slot of a key, as CLUSTER KEYSLOT computes it. */
function keySlot(key) {
  let k = bytes(key);
  const start = k.indexOf(0x7b); // {
  if (start >= 0) {
    const end = k.indexOf(0x7d, start + 1); // }
    if (end > start + 1) k = k.subarray(start + 1, end);
  }
  return crc16(k) % SLOT_COUNT;
}

/** The tag of every partition, read from docs/tags/<partitions>.txt. */
function loadTags(partitions, tagsDir = TAGS_DIR) {
  if (!PARTITION_COUNTS.includes(partitions)) throw new Error(`${partitions} partitions has no tag table`);
  const file = path.join(tagsDir, `${partitions}.txt`);
  const tags = fs.readFileSync(file, 'ascii').split('\n').slice(0, -1);
  if (tags.length !== partitions) throw new Error(`${file} has ${tags.length} tags, want ${partitions}`);
  return tags;
}

/** The cluster engine's mapping of channels to partitions and keys. */
class Layout {
  constructor(partitions, prefix = '', tagsDir = TAGS_DIR) {
    this.partitions = partitions;
    this.prefix = bytes(prefix);
    this.tags = loadTags(partitions, tagsDir);
    this.tagSet = new Set(this.tags);
  }

  partition(channel) { return jump(xxh64(channel), this.partitions); }

  tag(partition) { return this.tags[partition]; }

  /** Wire key: "{" + tag + "}." + prefix + channel. */
  key(channel) {
    const tag = this.tags[this.partition(channel)];
    return Buffer.concat([Buffer.from(`{${tag}}.`, 'ascii'), this.prefix, bytes(channel)]);
  }

  slot(partition) { return keySlot(this.tags[partition]); }

  /** Channel (a Buffer) of a wire key of this layout, or null. */
  channel(key) {
    const k = bytes(key);
    const end = k.indexOf(0x7d);
    if (k[0] !== 0x7b || end < 2 || !this.tagSet.has(k.subarray(1, end).toString('latin1'))) return null;
    const head = Buffer.concat([Buffer.from('.'), this.prefix]);
    const rest = k.subarray(end + 1);
    if (rest.length <= head.length || !rest.subarray(0, head.length).equals(head)) return null;
    return rest.subarray(head.length);
  }

  fingerprint() {
    const fields = [Buffer.from('shardcast-layout-v1'), Buffer.from(String(this.partitions)), this.prefix,
      ...this.tags.map((t) => Buffer.from(t, 'ascii'))];
    const data = Buffer.concat(fields.flatMap((f) => [Buffer.from(`${f.length}:`), f]));
    return `${this.partitions}-${(xxh64(data) >> 16n).toString(16).padStart(12, '0')}`;
  }
}

const URL_SCHEMES = ['redis', 'rediss', 'valkey', 'valkeys'];
// What Go's net/url lets through unescaped in a host (encodeHost), less the
// brackets, which only delimit an IPv6 literal here.
const HOST_RE = /^[A-Za-z0-9\-._~!$&'()*+,;=:<>"]$/;
const USERINFO_RE = /^[A-Za-z0-9\-._~!$&'()*+,;=:%@]*$/;
const BAD_PERCENT = /%(?![0-9A-Fa-f]{2})/;

// Go's net.SplitHostPort checks; throws where it fails.
function checkHostPort(addr) {
  let ok;
  if (addr.startsWith('[')) {
    const end = addr.indexOf(']');
    ok = end > 0 && addr[end + 1] === ':' && !addr.slice(end + 2).includes(':')
      && !addr.slice(1).includes('[') && !addr.slice(end + 1).includes(']');
  } else {
    const i = addr.lastIndexOf(':');
    ok = i >= 0 && !addr.slice(0, i).includes(':') && !addr.includes('[') && !addr.includes(']');
  }
  if (!ok) throw new Error(`address ${JSON.stringify(addr)} is not host:port or a redis:// URL`);
}

// Go's url unescape in host mode: %XX only for non-ASCII bytes (and %25),
// other bytes as written; the result must be UTF-8.
function unescapeHost(s, zone = false) {
  if (BAD_PERCENT.test(s)) throw new Error('bad %-escape in host');
  const out = [];
  for (let i = 0; i < s.length;) {
    if (s[i] === '%') {
      const v = parseInt(s.slice(i + 1, i + 3), 16);
      const allowed = s.slice(i, i + 3) === '%25' || v >= 0x80 || (zone && HOST_RE.test(String.fromCharCode(v)));
      if (!allowed) throw new Error(`host may not %-escape ${JSON.stringify(String.fromCharCode(v))}`);
      out.push(Buffer.from([v]));
      i += 3;
      continue;
    }
    const c = String.fromCodePoint(s.codePointAt(i));
    if (c.charCodeAt(0) < 0x80 && !HOST_RE.test(c)) throw new Error(`invalid character ${JSON.stringify(c)} in host`);
    out.push(bytes(c));
    i += c.length;
  }
  return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(out));
}

/**
 * sentinel/<name> for a master reached through Sentinel
 * (scheme+sentinel://[userinfo@]host[:port][,host[:port]…]/name), as Go's
 * redisaddr.Parse names it; throws where Go refuses the address.
 */
function sentinelName(addr, rest, fail) {
  const slash = rest.indexOf('/');
  const name = slash < 0 ? '' : rest.slice(slash + 1);
  if (!name || /[/?# \t\r\n]/.test(name)) fail('want a master name after the Sentinels');
  let hosts = rest.slice(0, slash);
  const at = hosts.lastIndexOf('@');
  const userinfo = at < 0 ? '' : hosts.slice(0, at);
  if (!USERINFO_RE.test(userinfo) || BAD_PERCENT.test(userinfo)) fail('invalid user information');
  hosts = hosts.slice(at + 1);
  const seen = new Set();
  for (let h of hosts.split(',')) {
    try {
      checkHostPort(h);
    } catch (e) {
      const bare = h.replace(/^\[|\]$/g, '');
      h = bare.includes(':') ? `[${bare}]:26379` : `${bare}:26379`;
    }
    const i = h.lastIndexOf(':');
    const host = h.slice(0, i).replace(/^\[|\]$/g, '');
    const port = h.slice(i + 1);
    if (!host || /[/\\@?#\s\x00-\x1f\x7f]/.test(host)) fail(`Sentinel ${JSON.stringify(h)} is not host:port`);
    if (!/^[0-9]+$/.test(port) || Number(port) < 1 || Number(port) > 65535) fail(`Sentinel port ${JSON.stringify(port)}`);
    const key = `${host.toLowerCase()}|${Number(port)}`;
    if (seen.has(key)) fail('lists a Sentinel twice');
    seen.add(key);
  }
  return `sentinel/${name}`;
}

/**
 * The name the sharded engine hashes for a configured address, as Go's
 * redisaddr.Parse computes it: host:port, or sentinel/<name> for a master
 * reached through Sentinel; throws where Go refuses one.
 */
function normalizeAddr(addr) {
  if (!addr.includes('://')) {
    checkHostPort(addr);
    return addr;
  }
  const fail = (why) => { throw new Error(`address ${JSON.stringify(addr)}: ${why}`); };
  const sep = addr.indexOf('://');
  const scheme = addr.slice(0, sep);
  const rest = addr.slice(sep + 3);
  if (URL_SCHEMES.map((s) => `${s}+sentinel`).includes(scheme.toLowerCase())) return sentinelName(addr, rest, fail);
  if (!URL_SCHEMES.includes(scheme.toLowerCase())) fail(`scheme ${JSON.stringify(scheme)}, want redis:// or rediss://`);
  if (addr.includes('?') || addr.includes('#')) fail('a query or fragment is not supported');
  if (/[\x00-\x1f\x7f]/.test(addr)) fail('control character');
  const slash = rest.indexOf('/');
  const netloc = slash < 0 ? rest : rest.slice(0, slash);
  if (slash >= 0 && BAD_PERCENT.test(rest.slice(slash))) fail('bad %-escape in the path');
  const at = netloc.lastIndexOf('@');
  const userinfo = at < 0 ? '' : netloc.slice(0, at);
  const hostport = netloc.slice(at + 1);
  if (!USERINFO_RE.test(userinfo) || BAD_PERCENT.test(userinfo)) fail('invalid user information');
  let host;
  let colonPort;
  if (hostport.startsWith('[')) {
    const end = hostport.lastIndexOf(']');
    if (end < 0 || hostport.slice(1).includes('[')) fail('bad IPv6 literal');
    const literal = hostport.slice(1, end);
    colonPort = hostport.slice(end + 1);
    const z = literal.indexOf('%25');
    host = z < 0 ? unescapeHost(literal) : `${unescapeHost(literal.slice(0, z))}%${unescapeHost(literal.slice(z + 3), true)}`;
    const pct = host.indexOf('%');
    if (!net.isIPv6(pct < 0 ? host : host.slice(0, pct)) || pct === host.length - 1) fail(`${JSON.stringify(host)} is not an IPv6 address`);
  } else {
    const i = hostport.lastIndexOf(':');
    colonPort = i < 0 ? '' : hostport.slice(i);
    host = unescapeHost(i < 0 ? hostport : hostport.slice(0, i));
  }
  if (!/^(:[0-9]*)?$/.test(colonPort)) fail(`invalid port ${JSON.stringify(colonPort)}`);
  if (!host) fail('no host');
  const port = colonPort.slice(1) || '6379';
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function shardedFingerprint(addrs) {
  const data = `sharded/v1\n${addrs.map(normalizeAddr).join('\n')}`;
  return `sharded-${crypto.createHash('sha256').update(data, 'utf8').digest('hex').slice(0, 12)}`;
}

// Envelope frame, version 1.
const MAGIC = 0xc1;
const VERSION = 0x01;
const HEADER_SIZE = 10;
const MIN_US = 10n ** 15n; // valid non-zero times: [MIN_US, MAX_US)
const MAX_US = 10n ** 16n;

/** Not an envelope frame; kind is "short", "magic", "version" or "time". */
class BadFrame extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

/**
 * Frame payload with a publish time in µs since the Unix epoch (BigInt).
 * undefined means now; 0n means unknown; other times outside the valid
 * range are clamped into it, as the Go publisher does.
 */
function encodeFrame(payload, timestampUs) {
  let us = timestampUs === undefined ? BigInt(Date.now()) * 1000n : BigInt(timestampUs);
  if (us !== 0n) us = us < MIN_US ? MIN_US : us >= MAX_US ? MAX_US - 1n : us;
  const header = Buffer.alloc(HEADER_SIZE);
  header[0] = MAGIC;
  header[1] = VERSION;
  header.writeBigUInt64BE(us, 2);
  return Buffer.concat([header, bytes(payload)]);
}

/** Returns {timestampUs (BigInt, 0n if unknown), payload (Buffer)}. */
function decodeFrame(frame) {
  const f = bytes(frame);
  if (f.length < HEADER_SIZE) throw new BadFrame('short', 'shorter than the 10-byte header');
  if (f[0] !== MAGIC) throw new BadFrame('magic', 'first byte is not 0xC1');
  if (f[1] !== VERSION) throw new BadFrame('version', `version ${f[1]}`);
  const us = f.readBigUInt64BE(2);
  if (us !== 0n && (us < MIN_US || us >= MAX_US)) throw new BadFrame('time', 'publish time out of range');
  return { timestampUs: us, payload: f.subarray(HEADER_SIZE) };
}

module.exports = {
  PARTITION_COUNTS, SLOT_COUNT, BadFrame, Layout, crc16, decodeFrame, encodeFrame, instance, jump,
  keySlot, loadTags, normalizeAddr, ready, shardedFingerprint, xxh64,
};
