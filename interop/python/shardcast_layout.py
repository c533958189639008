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
import os
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
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


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
        self.partitions = partitions
        self.prefix = _bytes(prefix)
        self.tags = load_tags(partitions, tags_dir)
        self._tag_set = frozenset(t.encode("ascii") for t in self.tags)

    def partition(self, channel):
        return jump(xxh64(channel), self.partitions)

    def tag(self, partition):
        return self.tags[partition]

    def key(self, channel):
        """Wire key: b"{" + tag + b"}." + prefix + channel."""
        tag = self.tags[self.partition(channel)].encode("ascii")
        return b"{" + tag + b"}." + self.prefix + _bytes(channel)

    def slot(self, partition):
        return key_slot(self.tags[partition])

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


def normalize_addr(addr):
    """The host:port the sharded engine hashes for a configured address."""
    if "://" not in addr:
        return addr
    if "?" in addr or "#" in addr:
        raise ValueError("address %r: a query or fragment is not supported" % addr)
    netloc = addr.split("://", 1)[1].split("/", 1)[0]
    netloc = netloc.rsplit("@", 1)[-1]
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = netloc.partition(":")
    port = port or "6379"
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
