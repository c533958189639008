package shardcast

//go:generate go run ./internal/taggen/cmd/taggen -o tags_table.go

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/jump"
)

// SupportedPartitions returns the partition counts NewLayout accepts, in
// increasing order: every power of two from 16 to 4096, each with a shipped,
// balanced tag table. Each call returns a new slice the caller may keep or
// modify.
func SupportedPartitions() []int {
	var out []int
	for n := minPartitions; n <= maxPartitions; n *= 2 {
		out = append(out, n)
	}
	return out
}

const (
	minPartitions = 16
	maxPartitions = len(partitionTags)
	// maxTagLen bounds the tag search in Channel; the generator never
	// emits longer tags.
	maxTagLen = 4
)

// Layout maps application channels to partitions and partitions to wire
// keys. A channel's partition is the jump consistent hash of the channel's
// 64-bit xxHash over the partition count, and partition p is published
// under the Redis Cluster hash tag Tag(p), so all its channels share one
// slot.
//
// The tags come from a generated table (tags_table.go) built so that a
// cluster created by `redis-cli --cluster create` with any number K of
// masters from 1 to Partitions() gets a number of partitions per master
// that differs by at most one between masters. The table for N partitions
// is the first N entries of the table for 2N: growing a layout from N to
// 2N partitions keeps every channel that jump hashing leaves in place
// (about half of them) on the same wire key.
//
// Every node that publishes or subscribes a channel must use the same
// partition count and prefix; compare Fingerprint values to detect a
// mismatch. A Layout is immutable and safe for concurrent use.
type Layout struct {
	partitions  int
	prefix      string
	fingerprint string
}

// NewLayout returns the layout with the given partition count and channel
// prefix. partitions must be one of SupportedPartitions(); any other value
// gives an error wrapping ErrInvalidConfig. prefix is put between the
// partition tag and the channel name on the wire, may be empty, and may
// hold any bytes: Redis only hashes the tag, which always comes first.
func NewLayout(partitions int, prefix string) (*Layout, error) {
	if !supportedPartitions(partitions) {
		return nil, fmt.Errorf("%w: %d partitions has no tag table; supported counts are the powers of two %d to %d (%s)",
			ErrInvalidConfig, partitions, minPartitions, maxPartitions, supportedList())
	}
	l := &Layout{partitions: partitions, prefix: prefix}
	l.fingerprint = layoutFingerprint(partitions, prefix, partitionTags[:partitions])
	return l, nil
}

func supportedPartitions(n int) bool {
	return n >= minPartitions && n <= maxPartitions && n&(n-1) == 0
}

func supportedList() string {
	var b strings.Builder
	for i, n := range SupportedPartitions() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// Partitions returns the number of partitions, N.
func (l *Layout) Partitions() int { return l.partitions }

// Prefix returns the channel prefix the layout puts on the wire.
func (l *Layout) Prefix() string { return l.prefix }

// Partition returns the partition of channel, in [0, Partitions()). It is
// jump.Channel(channel, Partitions()) and does not allocate.
func (l *Layout) Partition(channel string) int {
	return jump.Channel(channel, l.partitions)
}

// Tag returns the hash tag of partition p: 1 to 4 characters of [0-9a-z].
// It returns "" for p outside [0, Partitions()).
func (l *Layout) Tag(p int) string {
	if p < 0 || p >= l.partitions {
		return ""
	}
	return partitionTags[p]
}

// Slot returns the Redis Cluster hash slot of partition p, which every key
// of the partition hashes to. It returns 0 for p outside
// [0, Partitions()); callers must not pass such values.
func (l *Layout) Slot(p int) uint16 {
	if p < 0 || p >= l.partitions {
		return 0
	}
	return partitionSlots[p]
}

// Key returns the wire key of channel: "{" + tag + "}." + prefix + channel,
// where tag is the tag of the channel's partition. Redis hashes only the
// tag, so the key lies in Slot(Partition(channel)) whatever bytes channel
// holds. Key allocates only the returned string.
func (l *Layout) Key(channel string) string {
	return l.PartitionKey(l.Partition(channel), channel)
}

// PartitionKey returns the wire key of channel in partition p. It equals
// Key(channel) when p == Partition(channel), and saves the hash for callers
// that already know p. Given a p outside [0, Partitions()) it computes the
// partition from channel rather than build a key no subscriber expects.
func (l *Layout) PartitionKey(p int, channel string) string {
	if p < 0 || p >= l.partitions {
		p = l.Partition(channel)
	}
	return "{" + partitionTags[p] + "}." + l.prefix + channel
}

// AppendKey appends Key(channel) to dst and returns the extended slice.
// It lets a hot path build the key in a reused buffer instead of a new
// string.
func (l *Layout) AppendKey(dst []byte, channel string) []byte {
	dst = append(dst, '{')
	dst = append(dst, partitionTags[l.Partition(channel)]...)
	dst = append(dst, '}', '.')
	dst = append(dst, l.prefix...)
	return append(dst, channel...)
}

// Channel returns the channel name of a wire key built by Key or
// PartitionKey, and true. It returns "" and false for a key this layout
// does not produce: one that does not start with "{tag}." for a tag of one
// of this layout's partitions, lacks the prefix, or names an empty
// channel. Channel does not check that the channel hashes to the tag's
// partition (use Partition for that) and does not allocate: the result
// shares memory with key.
func (l *Layout) Channel(key string) (string, bool) {
	_, channel, ok := l.SplitKey(key)
	return channel, ok
}

// SplitKey is Channel that also returns the partition the key's tag
// names, found from the tag alone (no hashing of the channel).
func (l *Layout) SplitKey(key string) (partition int, channel string, ok bool) {
	if len(key) < 3 || key[0] != '{' {
		return 0, "", false
	}
	end := strings.IndexByte(key[1:min(len(key), maxTagLen+2)], '}') + 1
	if end < 2 { // no '}' within reach, or an empty tag
		return 0, "", false
	}
	partition, ok = l.tagPartition(key[1:end])
	if !ok {
		return 0, "", false
	}
	rest := key[end+1:]
	if len(rest) == 0 || rest[0] != '.' || !strings.HasPrefix(rest[1:], l.prefix) {
		return 0, "", false
	}
	channel = rest[1+len(l.prefix):]
	if channel == "" {
		return 0, "", false
	}
	return partition, channel, true
}

// tagPartition returns the partition whose tag is tag. The tag's CRC16
// slot leads straight to the only candidate, so no map is needed.
func (l *Layout) tagPartition(tag string) (int, bool) {
	p := int(slotPositions()[crc16.ChecksumString(tag)&(crc16.SlotCount-1)])
	if p < 0 || p >= l.partitions || partitionTags[p] != tag {
		return 0, false
	}
	return p, true
}

// slotPositions maps each slot to the position in partitionTags of the tag
// that hashes to it, or -1. It is built on first use.
var slotPositions = sync.OnceValue(func() *[crc16.SlotCount]int16 {
	var pos [crc16.SlotCount]int16
	for i := range pos {
		pos[i] = -1
	}
	for p, s := range partitionSlots {
		pos[s] = int16(p)
	}
	return &pos
})

// Fingerprint returns a short string that identifies the layout: the
// partition count, then a hash of the hashing scheme's version, the
// partition count, the prefix and every tag of the table. Nodes whose
// fingerprints differ route some channels to different keys and will lose
// messages between them; equal fingerprints mean identical routing. The
// value is stable across processes, platforms and releases for as long as
// the layout routes channels the same way.
func (l *Layout) Fingerprint() string { return l.fingerprint }

// fingerprintVersion names the routing scheme: xxHash64 of the channel,
// jump consistent hash, "{tag}." + prefix + channel. Change it if any of
// those ever changes.
const fingerprintVersion = "shardcast-layout-v1"

func layoutFingerprint(partitions int, prefix string, tags []string) string {
	d := xxhash.New()
	// Length-prefixed fields keep distinct inputs from hashing the same
	// bytes, e.g. prefix "a" plus tag "b" versus prefix "ab".
	field := func(s string) {
		_, _ = d.WriteString(strconv.Itoa(len(s)))
		_, _ = d.WriteString(":")
		_, _ = d.WriteString(s)
	}
	field(fingerprintVersion)
	field(strconv.Itoa(partitions))
	field(prefix)
	for _, t := range tags {
		field(t)
	}
	return fmt.Sprintf("%d-%012x", partitions, d.Sum64()>>16)
}
