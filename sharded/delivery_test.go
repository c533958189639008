package sharded

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChannelsSpreadOverInstances subscribes 10,000 channels on 1 and on 4
// instances: once Subscribe returned, each instance holds its fair share
// of them, each channel once, on the instance Shard names. (Delivery on
// many channels is checked by the conformance suite.)
func TestChannelsSpreadOverInstances(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) {
			const total = 10_000
			servers := startServers(t, n)
			sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
			chans := channelNames("every:", total)

			require.NoError(t, sub.Subscribe(context.Background(), chans...))
			assert.Equal(t, total, sub.Stats().Channels)

			// Subscribe returned, so Redis confirmed every channel: the
			// counts must already be exact, not eventually.
			want := total / n
			sum := 0
			for i, s := range servers {
				got := pubsubChannels(t, s)
				sum += got
				assert.InDelta(t, want, got, float64(want)/10, "instance %d holds %d channels, want %d±10%%", i, got, want)
			}
			assert.Equal(t, total, sum)
			for _, ch := range chans[:50] {
				assert.EqualValues(t, 1, numsub(t, servers[sub.Shard(ch)], ch), "channel %s on its shard", ch)
			}
		})
	}
}

// TestForeignPublisher: a message PUBLISHed by a client that is not
// shardcast arrives as it was sent, with no timestamp; in raw mode that
// is normal, otherwise it is also counted as a bad frame. (Raw mode
// between brokers and PublishedAt are checked by the conformance suite.)
func TestForeignPublisher(t *testing.T) {
	servers := startServers(t, 1)
	ctx := context.Background()
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) {
			rec := newRecorder()
			sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle, Raw: raw}})
			ch := fmt.Sprintf("foreign:%v", raw)
			require.NoError(t, sub.Subscribe(ctx, ch))
			_, err := servers[0].Do(ctx, "PUBLISH", ch, "plain text")
			require.NoError(t, err)
			waitFor(t, "the message", func() bool { return rec.count(ch) == 1 })
			m := rec.get(ch)[0]
			assert.Equal(t, "plain text", string(m.Payload))
			assert.True(t, m.PublishedAt.IsZero())
			wantBad := uint64(1)
			if raw {
				wantBad = 0
			}
			assert.Equal(t, wantBad, sub.Stats().BadFrames)
		})
	}
}

// TestFingerprint: brokers that list the same addresses in the same order
// agree; any other list, including a reordering, does not.
func TestFingerprint(t *testing.T) {
	servers := startServers(t, 2)
	a, b := servers[0].Addr(), servers[1].Addr()
	// The layout record would refuse every list after the first; this
	// test compares the fingerprints itself.
	off := shardcast.Agreement{Off: true}
	fp := func(addrs ...string) string { return newBroker(t, Config{Addrs: addrs, Agreement: off}).Fingerprint() }

	same := fp(a, b)
	assert.NotEmpty(t, same)
	assert.Equal(t, same, fp(a, b))
	// A URL naming the same instance places channels the same way.
	assert.Equal(t, same, fp("redis://"+a, "redis://"+b))
	assert.NotEqual(t, same, fp(b, a))
	assert.NotEqual(t, same, fp(a))
	grown, err := Fingerprint([]string{a, b, "127.0.0.1:1"})
	require.NoError(t, err)
	assert.NotEqual(t, same, grown)
}
