"""Reference implementation of shardcast's wire layout (docs/LAYOUT.md).

Everything a Python publisher or subscriber needs to meet shardcast nodes on
the same Redis: the partition and wire key of a channel (cluster engine), the
instance of a channel (sharded engine), the hash slot of a key, the envelope
frame, and both layout fingerprints. Checked against
testdata/layout_vectors.json by test_vectors.py.

Channels, prefixes and keys may be str (encoded as UTF-8) or bytes; keys are
returned as bytes. The only dependency is the xxhash package.
"""

import hashlib
import ipaddress
import operator
import os
import re
import struct
import time

import xxhash

__all__ = [
    "PARTITION_COUNTS", "BadFrame", "Layout", "crc16", "decode_frame",
    "encode_frame", "instance", "jump", "key_slot", "load_tags",
    "normalize_addr", "sharded_fingerprint", "xxh64",
]

PARTITION_COUNTS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SLOT_COUNT = 16384
TAGS_DIR = os.environ.get("SHARDCAST_TAGS_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "tags")

_MASK64 = (1 << 64) - 1


def _bytes(s):
    if isinstance(s, str):
        return s.encode("utf-8")  # raises on lone surrogates: they have no UTF-8
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s)
    # bytes(5) would be five NUL bytes: a wrong channel, not an error.
    raise TypeError("want str or bytes, got %s" % type(s).__name__)


def xxh64(data):
    """XXH64 of data with seed 0, as an int in [0, 2**64)."""
    return xxhash.xxh64_intdigest(_bytes(data), 0)


def jump(key, buckets):
    """Jump consistent hash (Lamping and Veach) of a 64-bit key."""
    if buckets <= 1:
        return 0
    n = min(buckets, 2**31 - 1)
    b, j = -1, 0
    key &= _MASK64
    while j < n:
        b = j
        key = (key * 2862933555777941757 + 1) & _MASK64
        # Two float64 operations, in this order, then truncation.
        j = int(float(b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def instance(channel, instances):
    """Index in the ordered address list of the sharded engine's instance."""
    return jump(xxh64(channel), instances)


def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC_TABLE = _crc16_table()


def crc16(data):
    """CRC-16/XMODEM: polynomial 0x1021, initial 0, no reflection."""
    crc = 0
    for byte in _bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[(crc >> 8) ^ byte]
    return crc


def key_slot(key):
    """Redis Cluster hash slot of a key, as CLUSTER KEYSLOT computes it."""
    key = _bytes(key)
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16(key) % SLOT_COUNT


def load_tags(partitions, tags_dir=None):
    """The tag of every partition, read from docs/tags/<partitions>.txt."""
    if partitions not in PARTITION_COUNTS:
        raise ValueError("%d partitions has no tag table" % partitions)
    path = os.path.join(tags_dir or TAGS_DIR, "%d.txt" % partitions)
    with open(path, encoding="ascii") as f:
        tags = f.read().split("\n")[:-1]
    if len(tags) != partitions:
        raise ValueError("%s has %d tags, want %d" % (path, len(tags), partitions))
    return tags


class Layout:
    """The cluster engine's mapping of channels to partitions and keys."""

    def __init__(self, partitions, prefix="", tags_dir=None):
        # An int, not 16.0: the fingerprint hashes decimal(N), and str(16.0)
        # is "16.0".
        partitions = operator.index(partitions)
        self.partitions = partitions
        self.prefix = _bytes(prefix)
        self.tags = load_tags(partitions, tags_dir)
        self._tag_set = frozenset(t.encode("ascii") for t in self.tags)

    def partition(self, channel):
        return jump(xxh64(channel), self.partitions)

    def _check(self, partition):
        if not 0 <= partition < self.partitions:  # tags[-1] is the last tag
            raise IndexError("partition %d not in [0, %d)" % (partition, self.partitions))
        return partition

    def tag(self, partition):
        return self.tags[self._check(partition)]

    def key(self, channel):
        """Wire key: b"{" + tag + b"}." + prefix + channel."""
        tag = self.tags[self.partition(channel)].encode("ascii")
        return b"{" + tag + b"}." + self.prefix + _bytes(channel)

    def slot(self, partition):
        return key_slot(self.tags[self._check(partition)])

    def channel(self, key):
        """Channel of a wire key of this layout, or None."""
        key = _bytes(key)
        end = key.find(b"}")
        if not key.startswith(b"{") or end < 2:
            return None
        rest, head = key[end + 1:], b"." + self.prefix
        if key[1:end] not in self._tag_set:
            return None
        if not rest.startswith(head) or len(rest) == len(head):
            return None
        return rest[len(head):]

    def fingerprint(self):
        fields = [b"shardcast-layout-v1", str(self.partitions).encode(), self.prefix]
        fields += [t.encode("ascii") for t in self.tags]
        data = b"".join(str(len(f)).encode() + b":" + f for f in fields)
        return "%d-%012x" % (self.partitions, xxh64(data) >> 16)


_URL_SCHEMES = ("redis", "rediss", "valkey", "valkeys")
# What Go's net/url lets through unescaped in a host (encodeHost), less the
# brackets, which only delimit an IPv6 literal here.
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789-._~!$&'()*+,;=:<>\"")
_USERINFO_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                            "0123456789-._~!$&'()*+,;=:%@")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _split_host_port(addr):
    """Go's net.SplitHostPort checks; raises ValueError where it fails."""
    if addr.startswith("["):
        end = addr.find("]")
        ok = end > 0 and addr[end + 1:end + 2] == ":" and ":" not in addr[end + 2:]
        ok = ok and "[" not in addr[1:] and "]" not in addr[end + 1:]
    else:
        i = addr.rfind(":")
        ok = i >= 0 and ":" not in addr[:i] and "[" not in addr and "]" not in addr
    if not ok:
        raise ValueError("address %r is not host:port or a redis:// URL" % addr)


def _unescape_host(s, zone=False):
    """Go's url unescape in host mode: %XX only for non-ASCII bytes (and %25),
    other bytes as written; the result must be UTF-8."""
    if _BAD_PERCENT.search(s):
        raise ValueError("bad %-escape in host")
    out, i = bytearray(), 0
    while i < len(s):
        c = s[i]
        if c == "%":
            v = int(s[i + 1:i + 3], 16)
            if s[i:i + 3] != "%25" and (chr(v) not in _HOST_CHARS if zone else v < 0x80) and not (zone and v >= 0x80):
                raise ValueError("host may not %%-escape %r" % chr(v))
            out.append(v)
            i += 3
            continue
        if ord(c) < 0x80 and c not in _HOST_CHARS:
            raise ValueError("invalid character %r in host" % c)
        out += c.encode("utf-8")
        i += 1
    return out.decode("utf-8")  # UnicodeDecodeError is a ValueError


def _sentinel_name(addr, rest):
    """sentinel/<name> for a master reached through Sentinel
    (scheme+sentinel://[userinfo@]host[:port][,host[:port]...]/name), as Go's
    redisaddr.Parse names it; ValueError where Go refuses the address."""
    hosts, slash, name = rest.partition("/")
    if not slash or not name or any(c in name for c in "/?# \t\r\n"):
        raise ValueError("address %r: want a master name after the Sentinels" % addr)
    userinfo, at, hosts = hosts.rpartition("@")
    if at and (not _USERINFO_CHARS.issuperset(userinfo) or _BAD_PERCENT.search(userinfo)):
        raise ValueError("address %r: invalid user information" % addr)
    seen = set()
    for h in hosts.split(","):
        try:
            _split_host_port(h)
        except ValueError:
            h = ("[%s]:26379" if ":" in h.strip("[]") else "%s:26379") % h.strip("[]")
        host, _, port = h.rpartition(":")
        host = host.strip("[]")
        if not host or any(c in "/\\@?#" or c.isspace() or ord(c) < 0x20 or ord(c) == 0x7f for c in host):
            raise ValueError("address %r: Sentinel %r is not host:port" % (addr, h))
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError("address %r: Sentinel port %r" % (addr, port))
        key = (host.lower(), int(port))
        if key in seen:
            raise ValueError("address %r lists a Sentinel twice" % addr)
        seen.add(key)
    return "sentinel/" + name


def normalize_addr(addr):
    """The name the sharded engine hashes for a configured address, as Go's
    redisaddr.Parse computes it: host:port, or sentinel/<name> for a master
    reached through Sentinel; ValueError where Go refuses one."""
    if "://" not in addr:
        _split_host_port(addr)
        return addr
    scheme, _, rest = addr.partition("://")
    if scheme.lower() in tuple(s + "+sentinel" for s in _URL_SCHEMES):
        return _sentinel_name(addr, rest)
    if scheme.lower() not in _URL_SCHEMES:
        raise ValueError("address %r: scheme %r, want redis:// or rediss://" % (addr, scheme))
    if "?" in addr or "#" in addr:
        raise ValueError("address %r: a query or fragment is not supported" % addr)
    if any(c < " " or c == "\x7f" for c in addr):
        raise ValueError("address %r: control character" % addr)
    netloc, _, path = rest.partition("/")
    if _BAD_PERCENT.search(path):
        raise ValueError("address %r: bad %%-escape in the path" % addr)
    userinfo, at, hostport = netloc.rpartition("@")
    if at and (not _USERINFO_CHARS.issuperset(userinfo) or _BAD_PERCENT.search(userinfo)):
        raise ValueError("address %r: invalid user information" % addr)
    if hostport.startswith("["):
        end = hostport.rfind("]")
        if end < 0 or "[" in hostport[1:]:
            raise ValueError("address %r: bad IPv6 literal" % addr)
        literal, colon_port = hostport[1:end], hostport[end + 1:]
        z = literal.find("%25")
        host = _unescape_host(literal) if z < 0 else \
            _unescape_host(literal[:z]) + "%" + _unescape_host(literal[z + 3:], zone=True)
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError
        except ValueError:
            raise ValueError("address %r: %r is not an IPv6 address" % (addr, host)) from None
    else:
        i = hostport.rfind(":")
        host, colon_port = (hostport[:i], hostport[i:]) if i >= 0 else (hostport, "")
        host = _unescape_host(host)
    if not re.fullmatch(r"(:[0-9]*)?", colon_port):
        raise ValueError("address %r: invalid port %r" % (addr, colon_port))
    if not host:
        raise ValueError("address %r has no host" % addr)
    port = colon_port[1:] or "6379"
    return ("[%s]:%s" if ":" in host else "%s:%s") % (host, port)


def sharded_fingerprint(addrs):
    data = "sharded/v1\n" + "\n".join(normalize_addr(a) for a in addrs)
    return "sharded-" + hashlib.sha256(data.encode("utf-8")).hexdigest()[:12]


# Envelope frame, version 1.
MAGIC, VERSION, HEADER_SIZE = 0xC1, 0x01, 10
MIN_US, MAX_US = 10**15, 10**16  # valid non-zero times: [MIN_US, MAX_US)


class BadFrame(ValueError):
    """Not an envelope frame; kind is "short", "magic", "version" or "time"."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def encode_frame(payload, timestamp_us=None):
    """Frame payload with a publish time in µs since the Unix epoch.

    None means now; 0 means unknown; other times outside the valid range are
    clamped into it, as the Go publisher does.
    """
    if timestamp_us is None:
        timestamp_us = time.time_ns() // 1000
    if timestamp_us != 0:
        timestamp_us = min(max(timestamp_us, MIN_US), MAX_US - 1)
    return struct.pack(">BBQ", MAGIC, VERSION, timestamp_us) + _bytes(payload)


def decode_frame(frame):
    """Return (timestamp_us, payload) of a frame; timestamp_us 0 is unknown."""
    frame = bytes(frame)
    if len(frame) < HEADER_SIZE:
        raise BadFrame("short", "shorter than the 10-byte header")
    if frame[0] != MAGIC:
        raise BadFrame("magic", "first byte is not 0xC1")
    if frame[1] != VERSION:
        raise BadFrame("version", "version %d" % frame[1])
    (us,) = struct.unpack(">Q", frame[2:HEADER_SIZE])
    if us != 0 and not MIN_US <= us < MAX_US:
        raise BadFrame("time", "publish time out of range")
    return us, frame[HEADER_SIZE:]
