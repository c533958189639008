package shardcast_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/jump"
)

func mustLayout(t testing.TB, partitions int, prefix string) *shardcast.Layout {
	t.Helper()
	l, err := shardcast.NewLayout(partitions, prefix)
	require.NoError(t, err)
	return l
}

func TestLayoutNewSupportedCounts(t *testing.T) {
	require.Equal(t, []int{16, 32, 64, 128, 256, 512, 1024, 2048, 4096}, shardcast.SupportedPartitions())
	for _, n := range shardcast.SupportedPartitions() {
		l := mustLayout(t, n, "p:")
		assert.Equal(t, n, l.Partitions())
		assert.Equal(t, "p:", l.Prefix())
	}
}

func TestLayoutNewRejectsUnsupportedCounts(t *testing.T) {
	for _, n := range []int{0, -1, -16, 1, 8, 15, 17, 100, 127, 129, 3000, 8192, 1 << 30} {
		l, err := shardcast.NewLayout(n, "")
		require.Error(t, err, "partitions %d", n)
		assert.Nil(t, l)
		assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
		assert.Contains(t, err.Error(), strconv.Itoa(n))
		assert.Contains(t, err.Error(), "16, 32, 64, 128, 256, 512, 1024, 2048, 4096")
	}
}

// TestLayoutSupportedPartitionsReturnsACopy checks that a caller that
// modifies the returned slice changes neither later results nor what
// NewLayout accepts.
func TestLayoutSupportedPartitionsReturnsACopy(t *testing.T) {
	got := shardcast.SupportedPartitions()
	got[0] = 100
	assert.Equal(t, 16, shardcast.SupportedPartitions()[0])
	_, err := shardcast.NewLayout(100, "")
	require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	_, err = shardcast.NewLayout(16, "")
	require.NoError(t, err)
}

// TestPartitionGolden pins Partition for fixed channels: a change here
// re-routes live channels, so it must never happen silently.
func TestPartitionGolden(t *testing.T) {
	channels := []string{"a", "chat:room:1", "chat:room:2", "user:42:notifications", "news", "ümlaut", "{x}", "a{b}c", "\x00\xff", "🙂"}
	golden := map[int][]int{
		16:   {8, 8, 11, 6, 12, 13, 12, 5, 11, 3},
		128:  {17, 45, 67, 81, 102, 92, 26, 69, 75, 3},
		1024: {894, 873, 563, 868, 154, 92, 344, 792, 545, 568},
		4096: {1478, 2656, 563, 1926, 2785, 3882, 2793, 792, 2902, 2807},
	}
	for n, want := range golden {
		l := mustLayout(t, n, "app.")
		for i, ch := range channels {
			assert.Equal(t, want[i], l.Partition(ch), "N=%d channel %q", n, ch)
			assert.Equal(t, jump.Hash(xxhash.Sum64String(ch), n), l.Partition(ch))
			assert.Equal(t, jump.Channel(ch, n), l.Partition(ch))
		}
	}
}

// TestLayoutKeyGolden pins whole wire keys, tags included.
func TestLayoutKeyGolden(t *testing.T) {
	l := mustLayout(t, 128, "app.")
	cases := []struct {
		channel, key string
		slot         uint16
	}{
		{"a", "{6z6}.app.a", 1538},
		{"chat:room:1", "{8i7}.app.chat:room:1", 6914},
		{"chat:room:2", "{ebv}.app.chat:room:2", 898},
		{"user:42:notifications", "{dau}.app.user:42:notifications", 4482},
	}
	for _, c := range cases {
		assert.Equal(t, c.key, l.Key(c.channel))
		assert.Equal(t, c.slot, l.Slot(l.Partition(c.channel)))
		assert.Equal(t, c.slot, crc16.Slot(c.key))
	}
	wantTags := []string{"7lw", "5n1", "su5", "h8s", "nc2", "35p", "dhl", "176"}
	wantSlots := []uint16{2, 8194, 4098, 12290, 2050, 6146, 10242, 14338}
	for p := range wantTags {
		assert.Equal(t, wantTags[p], l.Tag(p), "partition %d", p)
		assert.Equal(t, wantSlots[p], l.Slot(p), "partition %d", p)
	}
}

func TestLayoutTagAndSlotOutOfRange(t *testing.T) {
	l := mustLayout(t, 16, "")
	for _, p := range []int{-1, 16, 17, 4095, 1 << 40} {
		assert.Empty(t, l.Tag(p), "partition %d", p)
		assert.Zero(t, l.Slot(p), "partition %d", p)
	}
}

// awkwardChannels are channel names that could confuse a naive wire
// encoding: braces anywhere, binary bytes, multi-byte UTF-8, things that
// look like a wire key themselves.
var awkwardChannels = []string{
	"{", "}", "{}", "}{x}", "{x}", "{x}.y", "a{b}c", "{{}}", "{}{", "x}",
	"\x00", "\x00\x01\xff", "\xff\xfe{\x00}", "ünï{cödé}", "🙂", "漢字",
	".", "..", "{6z6}.app.a", "app.", " ", "\n", strings.Repeat("{a}", 100),
	strings.Repeat("x", 10000),
}

func TestLayoutKeyRoundTripAwkwardChannels(t *testing.T) {
	for _, prefix := range []string{"", "app.", "{p}", "pre{fix}."} {
		for _, n := range []int{16, 128, 4096} {
			l := mustLayout(t, n, prefix)
			for _, ch := range awkwardChannels {
				p := l.Partition(ch)
				require.True(t, p >= 0 && p < n)
				key := l.Key(ch)
				assert.Equal(t, "{"+l.Tag(p)+"}."+prefix+ch, key)
				assert.Equal(t, l.Slot(p), crc16.Slot(key), "prefix %q channel %q", prefix, ch)
				assert.Equal(t, key, l.PartitionKey(p, ch))
				got, ok := l.Channel(key)
				assert.True(t, ok, "prefix %q channel %q", prefix, ch)
				assert.Equal(t, ch, got)
			}
		}
	}
}

func TestLayoutKeyRoundTripRandomChannels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	l := mustLayout(t, 256, "r:")
	buf := make([]byte, 40)
	for range 2000 {
		b := buf[:1+rng.IntN(len(buf)-1)]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		ch := string(b)
		key := l.Key(ch)
		require.Equal(t, l.Slot(l.Partition(ch)), crc16.Slot(key), "channel %q", ch)
		got, ok := l.Channel(key)
		require.True(t, ok, "channel %q", ch)
		require.Equal(t, ch, got)
	}
}

func TestLayoutPartitionKeyOutOfRangeFallsBackToKey(t *testing.T) {
	l := mustLayout(t, 32, "x")
	for _, p := range []int{-1, 32, 1000} {
		assert.Equal(t, l.Key("chat"), l.PartitionKey(p, "chat"), "partition %d", p)
	}
	// An in-range partition is used as given: the caller owns that choice.
	other := (l.Partition("chat") + 1) % 32
	assert.Equal(t, "{"+l.Tag(other)+"}.xchat", l.PartitionKey(other, "chat"))
}

func TestLayoutChannelRejectsForeignKeys(t *testing.T) {
	l := mustLayout(t, 128, "app.")
	big := mustLayout(t, 4096, "app.")
	// A tag that exists only in larger tables.
	onlyBig := big.Tag(4000)
	good := l.Key("room")
	tag := l.Tag(l.Partition("room"))
	require.True(t, strings.HasPrefix(good, "{"+tag+"}.app."))

	bad := []string{
		"",
		"room",
		"{",
		"{}",
		"{}.app.room",
		"{" + tag,
		"{" + tag + "}",
		"{" + tag + "}.",
		"{" + tag + "}.app.",         // empty channel
		"{" + tag + "}app.room",      // missing dot
		"{" + tag + "}:app.room",     // wrong separator
		"{" + tag + "}.other.room",   // wrong prefix
		"{" + tag + "}.ap",           // truncated prefix
		"{" + onlyBig + "}.app.room", // tag of partition 4000
		"{zzzzz}.app.room",           // too long
		"{" + tag + "x}.app.room",    // unknown tag
		" {" + tag + "}.app.room",    // leading space
		"[" + tag + "].app.room",
	}
	if upper := strings.ToUpper(tag); upper != tag {
		bad = append(bad, "{"+upper+"}.app.room") // tags are lower case
	}
	for _, key := range bad {
		ch, ok := l.Channel(key)
		assert.False(t, ok, "key %q", key)
		assert.Empty(t, ch, "key %q", key)
	}
	ch, ok := big.Channel("{" + onlyBig + "}.app.room")
	assert.True(t, ok)
	assert.Equal(t, "room", ch)

	// Another prefix does not accept this layout's keys, and vice versa.
	_, ok = mustLayout(t, 128, "other.").Channel(good)
	assert.False(t, ok)
	_, ok = mustLayout(t, 128, "").Channel(good)
	assert.True(t, ok, "with an empty prefix the prefix is part of the channel")
}

// TestLayoutGrowthKeepsKeys checks the payoff of nested tables: after
// growing from N to 2N partitions a channel either keeps its partition and
// its exact wire key, or moves to one of the new partitions.
func TestLayoutGrowthKeepsKeys(t *testing.T) {
	for _, n := range []int{16, 128, 2048} {
		small, large := mustLayout(t, n, "g."), mustLayout(t, 2*n, "g.")
		kept := 0
		const channels = 4000
		for i := range channels {
			ch := "channel-" + strconv.Itoa(i)
			a, b := small.Partition(ch), large.Partition(ch)
			if a == b {
				kept++
				require.Equal(t, small.Key(ch), large.Key(ch), "channel %q", ch)
			} else {
				require.GreaterOrEqual(t, b, n, "channel %q moved from %d to an old partition %d", ch, a, b)
			}
		}
		// About half the channels stay; the bound is loose (±10σ).
		assert.InDelta(t, channels/2, kept, 320, "N=%d", n)
	}
}

func TestLayoutFingerprint(t *testing.T) {
	a := mustLayout(t, 128, "app.")
	assert.Equal(t, a.Fingerprint(), mustLayout(t, 128, "app.").Fingerprint())
	// Pinned: the fingerprint is compared between processes and releases.
	assert.Equal(t, "128-486337952457", a.Fingerprint())
	assert.Equal(t, "128-741322ee8310", mustLayout(t, 128, "").Fingerprint())
	assert.Equal(t, "16-e50b7f032b78", mustLayout(t, 16, "app.").Fingerprint())
	assert.Equal(t, "4096-f93aff6e3907", mustLayout(t, 4096, "app.").Fingerprint())
	assert.LessOrEqual(t, len(a.Fingerprint()), 20)

	seen := map[string]string{}
	for _, n := range shardcast.SupportedPartitions() {
		for _, prefix := range []string{"", "app.", "app", "App.", "app.x"} {
			fp := mustLayout(t, n, prefix).Fingerprint()
			id := fmt.Sprintf("%d/%q", n, prefix)
			prev, dup := seen[fp]
			require.False(t, dup, "%s and %s share fingerprint %s", prev, id, fp)
			seen[fp] = id
		}
	}
}

func TestLayoutIsSafeForConcurrentUse(t *testing.T) {
	l := mustLayout(t, 512, "c.")
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				ch := fmt.Sprintf("g%d-%d", g, i)
				got, ok := l.Channel(l.Key(ch))
				if !ok || got != ch {
					t.Errorf("round trip of %q gave %q, %v", ch, got, ok)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

func TestPartitionDoesNotAllocate(t *testing.T) {
	l := mustLayout(t, 128, "app.")
	key := l.Key("chat:room:12345")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = l.Partition("chat:room:12345") }))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = l.Channel(key) }))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = l.Tag(5) + l.Fingerprint() }))
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = l.Key("chat:room:12345") }))
}

func BenchmarkPartition(b *testing.B) {
	l := mustLayout(b, 128, "app.")
	b.ReportAllocs()
	for b.Loop() {
		_ = l.Partition("chat:room:12345")
	}
}

func BenchmarkKey(b *testing.B) {
	l := mustLayout(b, 128, "app.")
	b.ReportAllocs()
	for b.Loop() {
		_ = l.Key("chat:room:12345")
	}
}

func BenchmarkLayoutChannel(b *testing.B) {
	l := mustLayout(b, 128, "app.")
	key := l.Key("chat:room:12345")
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.Channel(key)
	}
}

// ExampleLayout shows the round trip from an application channel to the
// wire key the cluster engine publishes to, and back.
func ExampleLayout() {
	l, err := shardcast.NewLayout(128, "app.")
	if err != nil {
		fmt.Println(err)
		return
	}
	p := l.Partition("chat:room:1")
	key := l.Key("chat:room:1")
	ch, _ := l.Channel(key)
	fmt.Println(p, l.Tag(p), l.Slot(p))
	fmt.Println(key)
	fmt.Println(ch)
	// Output:
	// 45 8i7 6914
	// {8i7}.app.chat:room:1
	// chat:room:1
}

func TestAppendKeyEqualsKey(t *testing.T) {
	for _, n := range []int{16, 128, 4096} {
		for _, prefix := range []string{"", "app:", "{p}"} {
			l, err := shardcast.NewLayout(n, prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range []string{"a", "{", "}", "{x}y", "ü{ß}", "\x00\xff", "room:42"} {
				if got, want := string(l.AppendKey([]byte("pre"), ch)), "pre"+l.Key(ch); got != want {
					t.Fatalf("AppendKey(%q) = %q, want %q", ch, got, want)
				}
			}
		}
	}
}
