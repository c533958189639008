package shardcast_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/jump"
	"github.com/shardcast/shardcast/internal/layoutgen"
)

// TestLayoutFilesMatchGenerator proves that docs/tags/*.txt and
// testdata/layout_vectors.json are what internal/layoutgen produces now,
// so the language-neutral contract cannot drift from the Go code.
func TestLayoutFilesMatchGenerator(t *testing.T) {
	files, err := layoutgen.Files()
	require.NoError(t, err)
	for path, want := range files {
		got, err := os.ReadFile(filepath.FromSlash(path))
		require.NoError(t, err, "run `go generate ./internal/layoutgen`")
		if !bytes.Equal(want, got) {
			t.Errorf("%s differs from internal/layoutgen's output (%d vs %d bytes); run `go generate ./internal/layoutgen`, and never change a shipped tag", path, len(got), len(want))
		}
	}
	listed, err := filepath.Glob(filepath.Join("docs", "tags", "*.txt"))
	require.NoError(t, err)
	for _, p := range listed {
		assert.Contains(t, files, filepath.ToSlash(p), "docs/tags holds a file the generator does not write")
	}
}

// TestTagListsMatchLayout reads the tag lists the way another language
// would and checks them against Layout.Tag and the slot Redis computes.
func TestTagListsMatchLayout(t *testing.T) {
	previous := []string{}
	for _, n := range shardcast.SupportedPartitions() {
		l, err := shardcast.NewLayout(n, "")
		require.NoError(t, err)
		f, err := os.Open(filepath.Join("docs", "tags", strconv.Itoa(n)+".txt"))
		require.NoError(t, err)
		var tags []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			tags = append(tags, sc.Text())
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
		require.Len(t, tags, n)
		for p, tag := range tags {
			require.Equal(t, l.Tag(p), tag, "N=%d partition %d", n, p)
			require.Equal(t, l.Slot(p), crc16.Slot("{"+tag+"}."), "N=%d partition %d", n, p)
		}
		assert.Equal(t, previous, tags[:len(previous)], "the %d-partition list must start with the shorter list", n)
		previous = tags
	}
}

// layoutVectors is layout_vectors.json as another language reads it:
// decoded here with its own types, not layoutgen's.
type layoutVectors struct {
	PartitionCounts []int `json:"partition_counts"`
	Layout          []struct {
		Channel    string `json:"channel"`
		Hash       string `json:"hash"`
		Prefix     string `json:"prefix"`
		Partitions int    `json:"partitions"`
		Partition  int    `json:"partition"`
		Tag        string `json:"tag"`
		Key        string `json:"key"`
		Slot       int    `json:"slot"`
		Instances  int    `json:"instances"`
		Instance   int    `json:"instance"`
	} `json:"layout"`
	Jump []struct {
		Key     string `json:"key"`
		Buckets int    `json:"buckets"`
		Bucket  int    `json:"bucket"`
	} `json:"jump"`
	EnvelopeEncode []struct {
		TimestampUs string `json:"timestamp_us"`
		PayloadHex  string `json:"payload_hex"`
		FrameHex    string `json:"frame_hex"`
	} `json:"envelope_encode"`
	EnvelopeDecode []struct {
		FrameHex    string  `json:"frame_hex"`
		OK          bool    `json:"ok"`
		TimestampUs *string `json:"timestamp_us"`
		PayloadHex  *string `json:"payload_hex"`
		Error       string  `json:"error"`
	} `json:"envelope_decode"`
	LayoutFingerprints []struct {
		Partitions  int    `json:"partitions"`
		Prefix      string `json:"prefix"`
		Fingerprint string `json:"fingerprint"`
	} `json:"layout_fingerprints"`
	ShardedFingerprints []struct {
		Addrs       []string `json:"addrs"`
		Normalized  []string `json:"normalized"`
		Fingerprint string   `json:"fingerprint"`
	} `json:"sharded_fingerprints"`
	AddrNormalize []struct {
		Addr       string `json:"addr"`
		OK         bool   `json:"ok"`
		Normalized string `json:"normalized"`
	} `json:"addr_normalize"`
	KeyParse []struct {
		Partitions int    `json:"partitions"`
		Prefix     string `json:"prefix"`
		Key        string `json:"key"`
		OK         bool   `json:"ok"`
		Partition  int    `json:"partition"`
		Channel    string `json:"channel"`
		Why        string `json:"why"`
	} `json:"key_parse"`
	KeySlot []struct {
		Key  string `json:"key"`
		Slot int    `json:"slot"`
	} `json:"key_slot"`
}

func readLayoutVectors(t *testing.T) layoutVectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "layout_vectors.json"))
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var withComment struct {
		Comment string `json:"comment"`
		Spec    string `json:"spec"`
		layoutVectors
	}
	require.NoError(t, dec.Decode(&withComment))
	return withComment.layoutVectors
}

// TestLayoutVectors checks every vector of testdata/layout_vectors.json
// against the Go implementation, and that the vectors cover what the spec
// promises: every partition count, the empty prefix, instance counts 1 to
// 16, non-ASCII and brace-holding channels.
func TestLayoutVectors(t *testing.T) {
	v := readLayoutVectors(t)
	assert.Equal(t, shardcast.SupportedPartitions(), v.PartitionCounts)
	require.GreaterOrEqual(t, len(v.Layout), 500)

	counts, prefixes, instances := map[int]int{}, map[string]int{}, map[int]int{}
	var nonASCII, braces int
	layouts := map[string]*shardcast.Layout{}
	for i, c := range v.Layout {
		name := fmt.Sprintf("vector %d (%q, N=%d, prefix %q)", i, c.Channel, c.Partitions, c.Prefix)
		id := strconv.Itoa(c.Partitions) + "/" + c.Prefix
		l := layouts[id]
		if l == nil {
			var err error
			l, err = shardcast.NewLayout(c.Partitions, c.Prefix)
			require.NoError(t, err, name)
			layouts[id] = l
		}
		require.Equal(t, fmt.Sprintf("%016x", xxhash.Sum64String(c.Channel)), c.Hash, name)
		require.Equal(t, l.Partition(c.Channel), c.Partition, name)
		require.Equal(t, l.Tag(c.Partition), c.Tag, name)
		require.Equal(t, l.Key(c.Channel), c.Key, name)
		require.Equal(t, "{"+c.Tag+"}."+c.Prefix+c.Channel, c.Key, name)
		require.Equal(t, int(l.Slot(c.Partition)), c.Slot, name)
		require.Equal(t, int(crc16.Slot(c.Key)), c.Slot, name)
		require.Equal(t, jump.Channel(c.Channel, c.Instances), c.Instance, name)
		back, ok := l.Channel(c.Key)
		require.True(t, ok, name)
		require.Equal(t, c.Channel, back, name)

		counts[c.Partitions]++
		prefixes[c.Prefix]++
		instances[c.Instances]++
		if !isASCII(c.Channel) {
			nonASCII++
		}
		if bytes.ContainsAny([]byte(c.Channel), "{}") {
			braces++
		}
	}
	for _, n := range shardcast.SupportedPartitions() {
		assert.Positive(t, counts[n], "no vector for %d partitions", n)
	}
	assert.Positive(t, prefixes[""], "no vector with the empty prefix")
	assert.GreaterOrEqual(t, len(prefixes), 3, "too few prefixes")
	for k := 1; k <= 16; k++ {
		assert.Positive(t, instances[k], "no vector for %d instances", k)
	}
	assert.Positive(t, nonASCII, "no non-ASCII channel")
	assert.Positive(t, braces, "no channel with a brace")

	require.NotEmpty(t, v.Jump)
	for _, c := range v.Jump {
		key, err := strconv.ParseUint(c.Key, 10, 64)
		require.NoError(t, err)
		require.Equal(t, jump.Hash(key, c.Buckets), c.Bucket, "jump(%d, %d)", key, c.Buckets)
	}

	require.NotEmpty(t, v.LayoutFingerprints)
	for _, c := range v.LayoutFingerprints {
		l, err := shardcast.NewLayout(c.Partitions, c.Prefix)
		require.NoError(t, err)
		require.Equal(t, l.Fingerprint(), c.Fingerprint, "N=%d prefix %q", c.Partitions, c.Prefix)
	}
	// The sharded engine's fingerprint needs live instances; the interop
	// package checks it against a real sharded.Broker. Here: the vectors
	// are those of the documented formula.
	require.NotEmpty(t, v.ShardedFingerprints)
	for _, c := range v.ShardedFingerprints {
		fp, norm, err := layoutgen.ShardedFingerprint(c.Addrs)
		require.NoError(t, err)
		require.Equal(t, c.Normalized, norm)
		require.Equal(t, c.Fingerprint, fp)
	}
	// Addresses normalised (§6.2), the ones the engine refuses included.
	require.NotEmpty(t, v.AddrNormalize)
	for _, c := range v.AddrNormalize {
		fp, norm, err := layoutgen.ShardedFingerprint([]string{c.Addr})
		if !c.OK {
			assert.Error(t, err, "%q is refused", c.Addr)
			continue
		}
		if assert.NoError(t, err, c.Addr) {
			assert.Equal(t, []string{c.Normalized}, norm, c.Addr)
			assert.NotEmpty(t, fp)
		}
	}
	// Keys read back (§3.3), the ones a layout does not build included.
	require.NotEmpty(t, v.KeyParse)
	refused := 0
	for _, c := range v.KeyParse {
		l, err := shardcast.NewLayout(c.Partitions, c.Prefix)
		require.NoError(t, err)
		p, ch, ok := l.SplitKey(c.Key)
		require.Equal(t, c.OK, ok, "%q under N=%d prefix %q: %s", c.Key, c.Partitions, c.Prefix, c.Why)
		if ok {
			assert.Equal(t, c.Partition, p, c.Key)
			assert.Equal(t, c.Channel, ch, c.Key)
		} else {
			refused++
		}
	}
	assert.Greater(t, refused, len(v.KeyParse)/2, "mostly keys a layout must refuse")
	// The hashed-part rule (§3.4) on keys with braces anywhere.
	require.NotEmpty(t, v.KeySlot)
	for _, c := range v.KeySlot {
		assert.Equal(t, c.Slot, int(crc16.Slot(c.Key)), "%q", c.Key)
	}
}

// TestEnvelopeVectors checks the envelope vectors against package
// envelope: frames written, and frames read or rejected.
func TestEnvelopeVectors(t *testing.T) {
	v := readLayoutVectors(t)
	require.NotEmpty(t, v.EnvelopeEncode)
	for _, c := range v.EnvelopeEncode {
		us, err := strconv.ParseInt(c.TimestampUs, 10, 64)
		require.NoError(t, err)
		at := time.Time{}
		if us != 0 {
			at = time.UnixMicro(us)
		}
		payload, err := hex.DecodeString(c.PayloadHex)
		require.NoError(t, err)
		assert.Equal(t, c.FrameHex, hex.EncodeToString(envelope.Append(nil, at, payload)), "timestamp %d", us)
	}
	require.NotEmpty(t, v.EnvelopeDecode)
	kinds := map[string]bool{}
	for _, c := range v.EnvelopeDecode {
		frame, err := hex.DecodeString(c.FrameHex)
		require.NoError(t, err)
		at, payload, err := envelope.Decode(frame)
		if !c.OK {
			assert.ErrorIs(t, err, envelope.ErrBadFrame, "frame %s", c.FrameHex)
			assert.Contains(t, []string{"short", "magic", "version", "time"}, c.Error)
			kinds[c.Error] = true
			continue
		}
		require.NoError(t, err, "frame %s", c.FrameHex)
		require.NotNil(t, c.TimestampUs)
		require.NotNil(t, c.PayloadHex)
		us := int64(0)
		if !at.IsZero() {
			us = at.UnixMicro()
		}
		assert.Equal(t, *c.TimestampUs, strconv.FormatInt(us, 10), "frame %s", c.FrameHex)
		assert.Equal(t, *c.PayloadHex, hex.EncodeToString(payload), "frame %s", c.FrameHex)
	}
	assert.Len(t, kinds, 4, "every rejection rule has a vector")
}

func isASCII(s string) bool {
	return !slices.ContainsFunc([]byte(s), func(b byte) bool { return b >= utf8.RuneSelf })
}
