// Package layoutgen writes the files that carry shardcast's wire layout to
// implementations in other languages, from the Go implementation itself:
//
//   - docs/tags/N.txt, for every supported partition count N: the tag of
//     partition p on line p+1, exactly Layout.Tag(p);
//   - testdata/layout_vectors.json: channel → hash → partition → tag → key
//     → slot, the sharded engine's instance choice, the jump hash alone,
//     envelope frames both ways, and both layout fingerprints.
//
// docs/LAYOUT.md specifies what the files contain. The files are
// committed; `go generate ./internal/layoutgen` (or `make generate`)
// rewrites them, and a test in the module root fails when they differ from
// Files, so they cannot drift from the code.
package layoutgen

//go:generate go run ./cmd/layoutgen -root ../..

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/jump"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/sharded"
)

// VectorsPath and TagsDir are where Files puts its output, relative to the
// module root, with forward slashes.
const (
	VectorsPath = "testdata/layout_vectors.json"
	TagsDir     = "docs/tags"
)

// TagsPath returns the path of the tag list for n partitions.
func TagsPath(n int) string { return TagsDir + "/" + strconv.Itoa(n) + ".txt" }

// Files returns every generated file, keyed by its path relative to the
// module root.
func Files() (map[string][]byte, error) {
	files := make(map[string][]byte)
	for _, n := range shardcast.SupportedPartitions() {
		list, err := TagList(n)
		if err != nil {
			return nil, err
		}
		files[TagsPath(n)] = list
	}
	v, err := VectorsJSON()
	if err != nil {
		return nil, err
	}
	files[VectorsPath] = v
	return files, nil
}

// TagList returns the tag list of the n-partition layout: Tag(p) for p in
// [0, n), one per line, each line ending in "\n".
func TagList(n int) ([]byte, error) {
	l, err := shardcast.NewLayout(n, "")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for p := range n {
		b.WriteString(l.Tag(p))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// LayoutVector is one channel routed by both engines.
type LayoutVector struct {
	Channel    string `json:"channel"`
	Hash       string `json:"hash"` // XXH64 of the channel, 16 lower-case hex digits
	Prefix     string `json:"prefix"`
	Partitions int    `json:"partitions"`
	Partition  int    `json:"partition"`
	Tag        string `json:"tag"`
	Key        string `json:"key"`
	Slot       int    `json:"slot"`
	Instances  int    `json:"instances"`
	Instance   int    `json:"instance"`
}

// JumpVector is one jump consistent hash, key as a decimal string.
type JumpVector struct {
	Key     string `json:"key"`
	Buckets int    `json:"buckets"`
	Bucket  int    `json:"bucket"`
}

// EncodeVector is one envelope frame a publisher writes. TimestampUs is a
// decimal string (it may exceed 2^53); "0" means no time.
type EncodeVector struct {
	TimestampUs string `json:"timestamp_us"`
	PayloadHex  string `json:"payload_hex"`
	FrameHex    string `json:"frame_hex"`
}

// DecodeVector is one received message read as an envelope frame. When OK
// is true, TimestampUs and PayloadHex hold what it decodes to; when it is
// false, Error names the rule the frame breaks: "short", "magic",
// "version" or "time".
type DecodeVector struct {
	FrameHex    string  `json:"frame_hex"`
	OK          bool    `json:"ok"`
	TimestampUs *string `json:"timestamp_us,omitempty"`
	PayloadHex  *string `json:"payload_hex,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// LayoutFingerprint is the cluster engine's layout fingerprint.
type LayoutFingerprint struct {
	Partitions  int    `json:"partitions"`
	Prefix      string `json:"prefix"`
	Fingerprint string `json:"fingerprint"`
}

// ShardedFingerprintVector is the sharded engine's fingerprint of an address
// list: Addrs as configured, Normalized as hashed.
type ShardedFingerprintVector struct {
	Addrs       []string `json:"addrs"`
	Normalized  []string `json:"normalized"`
	Fingerprint string   `json:"fingerprint"`
}

// AddrVector is one configured address normalised as the sharded engine
// hashes it (LAYOUT.md §6.2): OK with Normalized, or refused.
type AddrVector struct {
	Addr       string `json:"addr"`
	OK         bool   `json:"ok"`
	Normalized string `json:"normalized,omitempty"`
}

// KeyParseVector is a wire key read back under a layout (LAYOUT.md §3.3):
// OK, and then the Partition its tag names and the Channel, or not this
// layout's key.
type KeyParseVector struct {
	Partitions int    `json:"partitions"`
	Prefix     string `json:"prefix"`
	Key        string `json:"key"`
	OK         bool   `json:"ok"`
	Partition  int    `json:"partition"`
	Channel    string `json:"channel"`
	Why        string `json:"why"`
}

// KeySlotVector is the Redis Cluster slot of a key (LAYOUT.md §3.4),
// braces anywhere.
type KeySlotVector struct {
	Key  string `json:"key"`
	Slot int    `json:"slot"`
}

// Vectors is the content of layout_vectors.json.
type Vectors struct {
	Spec                string                     `json:"spec"`
	PartitionCounts     []int                      `json:"partition_counts"`
	Layout              []LayoutVector             `json:"layout"`
	Jump                []JumpVector               `json:"jump"`
	EnvelopeEncode      []EncodeVector             `json:"envelope_encode"`
	EnvelopeDecode      []DecodeVector             `json:"envelope_decode"`
	LayoutFingerprints  []LayoutFingerprint        `json:"layout_fingerprints"`
	ShardedFingerprints []ShardedFingerprintVector `json:"sharded_fingerprints"`
	AddrNormalize       []AddrVector               `json:"addr_normalize"`
	KeyParse            []KeyParseVector           `json:"key_parse"`
	KeySlot             []KeySlotVector            `json:"key_slot"`
}

// Prefixes are the channel prefixes the layout vectors use.
var Prefixes = []string{"", "app:", "prod.chat.", "ns/ü/", "{p}"}

// specialChannels are the channels every implementation gets wrong first:
// non-ASCII text, braces anywhere, control bytes, JSON-hostile characters.
var specialChannels = []string{
	"a", "0", "room:42", "user:1001:notifications", "chat.general",
	"news/sport/football", "ÄÖÜ", "Ärger im Büro", "チャット", "频道:1",
	"😀", "emoji 🎉 party", "Ελληνικά", "עברית", "{x}y", "{}", "}{",
	"{a}{b}", "x{y}z", "{", "}", "{{}}", "tag{}inside", "{7lw}", " ",
	"tab\there", "line\nbreak", "nul\x00byte", "ÿ", "%s%d", `"quoted"`,
	`back\slash`, "<&>", "long:" + strings.Repeat("abcdefghij", 30),
}

// channelsPerCell is how many channels each (partition count, prefix) pair
// gets in the layout vectors.
const channelsPerCell = 14

// Build computes every vector from the Go implementation.
func Build() (*Vectors, error) {
	v := &Vectors{Spec: "docs/LAYOUT.md", PartitionCounts: shardcast.SupportedPartitions()}
	next := 0
	channel := func() string {
		defer func() { next++ }()
		// Every third channel is a special one, so each appears several
		// times, under different partition counts and prefixes.
		if next%3 == 0 {
			return specialChannels[(next/3)%len(specialChannels)]
		}
		if next%3 == 1 {
			return "channel-" + strconv.Itoa(next)
		}
		return "user:" + strconv.Itoa(next*7919) + ":feed"
	}
	for _, n := range v.PartitionCounts {
		for _, prefix := range Prefixes {
			l, err := shardcast.NewLayout(n, prefix)
			if err != nil {
				return nil, err
			}
			v.LayoutFingerprints = append(v.LayoutFingerprints, LayoutFingerprint{n, prefix, l.Fingerprint()})
			for range channelsPerCell {
				lv, err := layoutVector(l, channel(), 1+len(v.Layout)%16)
				if err != nil {
					return nil, err
				}
				v.Layout = append(v.Layout, lv)
			}
		}
	}
	v.Jump = jumpVectors()
	enc, dec, err := envelopeVectors()
	if err != nil {
		return nil, err
	}
	v.EnvelopeEncode, v.EnvelopeDecode = enc, dec
	sf, err := shardedFingerprints()
	if err != nil {
		return nil, err
	}
	v.ShardedFingerprints = sf
	v.AddrNormalize = addrVectors()
	if v.KeyParse, err = keyParseVectors(); err != nil {
		return nil, err
	}
	v.KeySlot = keySlotVectors()
	return v, nil
}

// keyParseVectors reads keys back under a few layouts: keys the layout
// builds, and keys that only look like them (a tag of the next larger
// table, no ".", another prefix, an empty channel or tag, no opening
// brace, a string that is no tag).
func keyParseVectors() ([]KeyParseVector, error) {
	var out []KeyParseVector
	for _, n := range []int{16, 128, 4096} {
		for _, prefix := range []string{"", "app:"} {
			l, err := shardcast.NewLayout(n, prefix)
			if err != nil {
				return nil, err
			}
			tag0 := l.Tag(0)
			cases := []struct{ key, why string }{
				{l.Key("room:42"), "a key of this layout"},
				{"{" + tag0 + "}." + prefix + "}{x", "braces in the channel"},
				{"{" + tag0 + "}" + prefix + "x", "no . after the tag"},
				{"{" + tag0 + "}.other:x", "another prefix (for a layout with one)"},
				{"{" + tag0 + "}." + prefix, "an empty channel"},
				{"{}." + prefix + "x", "an empty tag"},
				{tag0 + "}." + prefix + "x", "no opening brace"},
				{"{zzzz}." + prefix + "x", "a string that is no tag"},
			}
			if n < 4096 {
				bigger, err := shardcast.NewLayout(2*n, "")
				if err != nil {
					return nil, err
				}
				cases = append(cases, struct{ key, why string }{"{" + bigger.Tag(n) + "}." + prefix + "x", "a tag of the 2N table, not of this one"})
			}
			for _, c := range cases {
				p, ch, ok := l.SplitKey(c.key)
				out = append(out, KeyParseVector{Partitions: n, Prefix: prefix, Key: c.key, OK: ok, Partition: p, Channel: ch, Why: c.why})
			}
		}
	}
	return out, nil
}

// keySlotVectors are the hashed-part rule's edge cases.
func keySlotVectors() []KeySlotVector {
	keys := []string{"", "a", "{a}", "{a}{b}", "{}{a}", "{}", "}{a}", "{a", "a}", "{{a}}", "a{b}c", "x{}y{z}",
		"{abc}def", "{7lw}.room:42", "123456789", "{user1000}.following", "foo{}{bar}", "{ü}x"}
	out := make([]KeySlotVector, len(keys))
	for i, k := range keys {
		out[i] = KeySlotVector{k, int(crc16.Slot(k))}
	}
	return out
}

func layoutVector(l *shardcast.Layout, channel string, instances int) (LayoutVector, error) {
	p := l.Partition(channel)
	key := l.Key(channel)
	// The slot is what Redis computes from the key, and it must be the
	// partition's slot: check the two agree rather than trust either.
	slot := crc16.Slot(key)
	if slot != l.Slot(p) {
		return LayoutVector{}, fmt.Errorf("layoutgen: key %q hashes to slot %d, partition %d has slot %d", key, slot, p, l.Slot(p))
	}
	return LayoutVector{
		Channel:    channel,
		Hash:       fmt.Sprintf("%016x", xxhash.Sum64String(channel)),
		Prefix:     l.Prefix(),
		Partitions: l.Partitions(),
		Partition:  p,
		Tag:        l.Tag(p),
		Key:        key,
		Slot:       int(slot),
		Instances:  instances,
		Instance:   jump.Channel(channel, instances),
	}, nil
}

func jumpVectors() []JumpVector {
	keys := []uint64{0, 1, 2, 42, 256, 0xdeadbeef, 3735883980, 1 << 32, 1 << 33,
		0x8000000000000000, 16045690984833335023, 0xffffffffffffffff}
	buckets := []int{1, 2, 3, 10, 16, 57, 128, 1000, 4096, 65536, 1 << 20, 1<<31 - 1}
	var out []JumpVector
	for _, k := range keys {
		for _, b := range buckets {
			out = append(out, JumpVector{strconv.FormatUint(k, 10), b, jump.Hash(k, b)})
		}
	}
	return out
}

// envelopeTime is how a vector's timestamp becomes the time.Time Append
// takes: 0 is "no time", anything else a time in microseconds.
func envelopeTime(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

func envelopeVectors() ([]EncodeVector, []DecodeVector, error) {
	const (
		minUs = 1_000_000_000_000_000
		maxUs = 10_000_000_000_000_000
	)
	encodes := []struct {
		us      int64
		payload string
	}{
		{1_700_000_000_123_456, "hello"},
		{0, ""},
		{0, "no clock"},
		{minUs, "\x00"},
		{maxUs - 1, ""},
		{1_767_225_600_000_000, `{"event":"message","data":42}`},
		{1_767_225_600_000_001, "Ärger im Büro 😀"},
		{1_767_225_600_999_999, "\xc1\x01\x00\xff binary"},
		// Out of range times are clamped, never rejected.
		{1, "clamped up"},
		{-1, "before the epoch"},
		{minUs - 1, "just below"},
		{maxUs, "just above"},
		{9_000_000_000_000_000_000, "far future"},
	}
	var enc []EncodeVector
	for _, e := range encodes {
		frame := envelope.Append(nil, envelopeTime(e.us), []byte(e.payload))
		enc = append(enc, EncodeVector{strconv.FormatInt(e.us, 10), hex.EncodeToString([]byte(e.payload)), hex.EncodeToString(frame)})
	}

	frames := []string{
		"c10100060a241820224068656c6c6f", // the documented example
		"c1010000000000000000",           // no time, empty payload
		"c101000000000000000061",         // no time
		"c10100038d7ea4c6800000",         // earliest time
		"c101002386f26fc0ffff",           // latest time
		"c1010006469a1f2ac0007b7d",       // a JSON payload after the header
		"", "c1", "c101", "c10100060a2418202240", "c1010006",
		hex.EncodeToString([]byte(`{"event":"message","data":42}`)),
		hex.EncodeToString([]byte("hello, subscribers")),
		hex.EncodeToString([]byte("Ärger im Büro heute")),
		"82a16101a16202000000",           // MessagePack
		"c00100060a241820224068656c6c6f", // wrong magic
		"c10200060a241820224068656c6c6f", // future version
		"c10000060a241820224068656c6c6f", // version zero
		"c10101060a241820224068656c6c6f", // high time byte set
		"c10100038d7ea4c67fffaa",         // just below the range
		"c101002386f26fc10000aa",         // end of the range
		"c1010000000000000001aa",         // one microsecond
		"c101ffffffffffffffffaa",         // all ones
	}
	var dec []DecodeVector
	for _, h := range frames {
		frame, err := hex.DecodeString(h)
		if err != nil {
			return nil, nil, fmt.Errorf("layoutgen: frame %q: %w", h, err)
		}
		at, payload, err := envelope.Decode(frame)
		if err != nil {
			kind, kerr := decodeErrorKind(err)
			if kerr != nil {
				return nil, nil, kerr
			}
			dec = append(dec, DecodeVector{FrameHex: h, Error: kind})
			continue
		}
		us := int64(0)
		if !at.IsZero() {
			us = at.UnixMicro()
		}
		ts, body := strconv.FormatInt(us, 10), hex.EncodeToString(payload)
		dec = append(dec, DecodeVector{FrameHex: h, OK: true, TimestampUs: &ts, PayloadHex: &body})
	}
	return enc, dec, nil
}

// decodeErrorKind names the rule a rejected frame broke, from the error
// Decode returned.
func decodeErrorKind(err error) (string, error) {
	if !errors.Is(err, envelope.ErrBadFrame) {
		return "", fmt.Errorf("layoutgen: unexpected decode error: %w", err)
	}
	msg := err.Error()
	for _, k := range []struct{ substr, kind string }{
		{"shorter", "short"}, {"not a shardcast frame", "magic"}, {"version", "version"}, {"out of range", "time"},
	} {
		if strings.Contains(msg, k.substr) {
			return k.kind, nil
		}
	}
	return "", fmt.Errorf("layoutgen: unclassified decode error: %w", err)
}

// ShardedFingerprint returns the sharded engine's fingerprint of addrs
// (sharded.Fingerprint) and the list it hashes: each instance's host:port,
// or sentinel/<name> for a master reached through Sentinel.
func ShardedFingerprint(addrs []string) (string, []string, error) {
	norm := make([]string, len(addrs))
	for i, a := range addrs {
		t, err := redisaddr.Parse(a, redisaddr.Login{})
		if err != nil {
			return "", nil, fmt.Errorf("layoutgen: %w", err)
		}
		norm[i] = t.ID
	}
	fp, err := sharded.Fingerprint(addrs)
	return fp, norm, err
}

// addrVectors normalises addresses an implementation gets wrong first:
// percent-escapes in the host (an IPv6 zone, non-ASCII names), a host with
// colons, and the forms Go refuses (other schemes, no host, a bad port,
// a query, a bare host or IPv6 address without a port).
func addrVectors() []AddrVector {
	addrs := []string{
		"127.0.0.1:6379", "[::1]:6379", "redis-0:6379", "Redis-0.Example:7000",
		"redis://h", "redis://h:1", "REDIS://H:1", "rediss://u:p@h:2/3", "valkey://h", "valkeys://:pw@h:6380",
		"redis://[::1]", "redis://[2001:db8::1]:7001", "redis://[fe80::1%25eth0]:6379",
		"redis://caf%C3%A9:6379", "redis://a:b:6379", "redis://:p%40ss@10.0.0.1:6379/0", "redis://h:",
		"unix:///tmp/redis.sock", "redis://", "redis://:6379", "redis://u:p/ss@h:1", "redis://h:abc",
		"redis://[::1]x:1", "http://h:1", "redis+sentinel://h:1", "redis://h:1?db=2", "redis://h:1#x",
		"redis://h\x01:1", "localhost", "::1", "[::1]", "a:b:c", ":6379", "h:",
		"redis+sentinel://h:1/mymaster", "REDISS+SENTINEL://u:p@10.0.0.1,10.0.0.2:26380,[::1]/m-1",
		"valkey+sentinel://h/m", "valkeys+sentinel://h:1/m", "redis+sentinel://h:1/", "redis+sentinel:///m",
		"redis+sentinel://h:1/a/b", "redis+sentinel://h:1/a b", "redis+sentinel://h:99999/m", "redis+sentinel://h:1,h:1/m",
		"foo+sentinel://h:1/m",
	}
	out := make([]AddrVector, len(addrs))
	for i, a := range addrs {
		t, err := redisaddr.Parse(a, redisaddr.Login{})
		out[i] = AddrVector{Addr: a, OK: err == nil}
		if err == nil {
			out[i].Normalized = t.ID
		}
	}
	return out
}

func shardedFingerprints() ([]ShardedFingerprintVector, error) {
	lists := [][]string{
		{"127.0.0.1:6379"},
		{"127.0.0.1:6379", "127.0.0.1:6380"},
		{"127.0.0.1:6380", "127.0.0.1:6379"},
		{"redis-0:6379", "redis-1:6379", "redis-2:6379", "redis-3:6379"},
		{"redis://redis-0", "rediss://user:secret@redis-1:6380/2", "[::1]:7000", "redis://[::1]:7001"},
		{"valkey://cache-0:7000", "valkeys://:pw@cache-1", "redis://:p%40ss@10.0.0.1:6379/0", "rediss://u:p@[2001:db8::1]:6380"},
		{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379", "10.0.0.6:6379",
			"10.0.0.7:6379", "10.0.0.8:6379", "10.0.0.9:6379", "10.0.0.10:6379", "10.0.0.11:6379", "10.0.0.12:6379",
			"10.0.0.13:6379", "10.0.0.14:6379", "10.0.0.15:6379", "10.0.0.16:6379"},
		{"redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/shard-a", "rediss+sentinel://u:p@10.0.0.1/shard-b", "10.0.0.9:6379"},
	}
	var out []ShardedFingerprintVector
	for _, addrs := range lists {
		fp, norm, err := ShardedFingerprint(addrs)
		if err != nil {
			return nil, err
		}
		out = append(out, ShardedFingerprintVector{addrs, norm, fp})
	}
	return out, nil
}

// VectorsJSON returns layout_vectors.json: Build's vectors with one vector
// per line, so that a diff shows which vectors changed.
func VectorsJSON() ([]byte, error) {
	v, err := Build()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("{\n")
	field := func(name string, value any, last bool) error {
		fmt.Fprintf(&b, "  %q: ", name)
		if err := writeJSON(&b, value); err != nil {
			return err
		}
		if !last {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
		return nil
	}
	list := func(name string, n int, item func(i int) any, last bool) error {
		fmt.Fprintf(&b, "  %q: [\n", name)
		for i := range n {
			b.WriteString("    ")
			if err := writeJSON(&b, item(i)); err != nil {
				return err
			}
			if i < n-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString("  ]")
		if !last {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
		return nil
	}
	err = errors.Join(
		field("comment", "Generated by internal/layoutgen from the Go implementation; DO NOT EDIT. Format and meaning: docs/LAYOUT.md.", false),
		field("spec", v.Spec, false),
		field("partition_counts", v.PartitionCounts, false),
		list("layout", len(v.Layout), func(i int) any { return v.Layout[i] }, false),
		list("jump", len(v.Jump), func(i int) any { return v.Jump[i] }, false),
		list("envelope_encode", len(v.EnvelopeEncode), func(i int) any { return v.EnvelopeEncode[i] }, false),
		list("envelope_decode", len(v.EnvelopeDecode), func(i int) any { return v.EnvelopeDecode[i] }, false),
		list("layout_fingerprints", len(v.LayoutFingerprints), func(i int) any { return v.LayoutFingerprints[i] }, false),
		list("sharded_fingerprints", len(v.ShardedFingerprints), func(i int) any { return v.ShardedFingerprints[i] }, false),
		list("addr_normalize", len(v.AddrNormalize), func(i int) any { return v.AddrNormalize[i] }, false),
		list("key_parse", len(v.KeyParse), func(i int) any { return v.KeyParse[i] }, false),
		list("key_slot", len(v.KeySlot), func(i int) any { return v.KeySlot[i] }, true),
	)
	if err != nil {
		return nil, err
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

func writeJSON(b *bytes.Buffer, v any) error {
	var one bytes.Buffer
	enc := json.NewEncoder(&one)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("layoutgen: %w", err)
	}
	b.Write(bytes.TrimSuffix(one.Bytes(), []byte("\n")))
	return nil
}
