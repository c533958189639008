package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testConnsPerMaster asks for two subscribe connections per master: each
// master then holds exactly two, splitting its partitions by parity, and
// every channel delivers.
func testConnsPerMaster(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	waitNoSubscribers(t, masters)

	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Conn: shardcast.ConnOptions{SubscribeConns: 2}, Options: shardcast.Options{Handler: rec.handle}})
	channels := numbered("pair.", 3000)
	require.NoError(t, sub.Subscribe(ctx, channels...))
	l := sub.Layout()
	owned := sub.Masters()
	for _, m := range masters {
		var even, odd []int
		for _, p := range owned[m.Addr()] {
			if p%2 == 0 {
				even = append(even, p)
			} else {
				odd = append(odd, p)
			}
		}
		want := []int{len(inPartitions(l, channels, even)), len(inPartitions(l, channels, odd))}
		slices.Sort(want)
		clients, err := ssubClients(ctx, m)
		require.NoError(t, err)
		slices.Sort(clients)
		assert.Equal(t, want, clients, "two connections on %s, split by partition parity", m.Addr())
	}

	pub := newBroker(t, Config{Addrs: c.Seeds()})
	mark := time.Now()
	publishAll(t, pub, channels, "1")
	rec.waitSilentSince(t, channels, mark, 20*time.Second)

	require.NoError(t, sub.Close())
	waitNoSubscribers(t, masters)
}

func TestConnsPerMasterConfig(t *testing.T) {
	for _, n := range []int{-1, shardcast.MaxSubscribeConns + 1} {
		_, err := New(Config{Addrs: []string{"127.0.0.1:1"}, Conn: shardcast.ConnOptions{SubscribeConns: n}})
		assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "SubscribeConns %d", n)
	}
}
