package cluster

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testConcurrentCalls has goroutines subscribe and unsubscribe overlapping
// sets of channels at once, over many partitions. Calls for one channel
// are ordered by a test-side lock recording the last one; other calls
// overlap freely. Afterwards each channel is subscribed on its master
// (once) exactly when its last call was Subscribe, the broker's count
// agrees, and a publish reaches exactly those channels.
func testConcurrentCalls(t *testing.T, c *redistest.Cluster) {
	const (
		goroutines = 12
		rounds     = 40
		channels   = 48
	)
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	waitNoSubscribers(t, masters)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle}})
	chans := numbered("flip.", channels)

	var (
		locks      [channels]sync.Mutex
		subscribed [channels]bool
		wg         sync.WaitGroup
	)
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range rounds {
				// Two distinct channels per call, locked in index order.
				i, j := rng.IntN(channels), rng.IntN(channels)
				if i == j {
					j = (j + 1) % channels
				}
				if i > j {
					i, j = j, i
				}
				on := rng.IntN(2) == 0
				locks[i].Lock()
				locks[j].Lock()
				var err error
				if on {
					err = sub.Subscribe(ctx, chans[i], chans[j])
				} else {
					err = sub.Unsubscribe(ctx, chans[i], chans[j])
				}
				if err == nil {
					subscribed[i], subscribed[j] = on, on
				}
				locks[j].Unlock()
				locks[i].Unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	l := sub.Layout()
	want := 0
	for i, ch := range chans {
		key := l.Key(ch)
		owner, err := c.MasterOfSlot(ctx, crc16.Slot(key))
		require.NoError(t, err)
		n, err := owner.Do(ctx, "PUBSUB", "SHARDNUMSUB", key)
		require.NoError(t, err)
		expect := int64(0)
		if subscribed[i] {
			expect = 1
			want++
		}
		assert.Equal(t, []any{key, expect}, n, "channel %s: last call subscribe=%v", ch, subscribed[i])
	}
	assert.Equal(t, want, sub.Stats().Channels)

	pub := newBroker(t, Config{Addrs: c.Seeds()})
	for _, ch := range chans {
		require.NoError(t, pub.Publish(ctx, ch, []byte("1")))
	}
	require.True(t, waitFor(10*time.Second, func() bool { return rec.seen.Load() >= int64(want) }))
	// The subscribed channels all delivered; give a stray message to an
	// unsubscribed channel the time a delivery takes before checking.
	sentinel := -1
	for i := range chans {
		if subscribed[i] {
			sentinel = i
		}
	}
	if sentinel >= 0 {
		require.NoError(t, pub.Publish(ctx, chans[sentinel], []byte("2")))
		require.True(t, waitFor(10*time.Second, func() bool { return rec.count(chans[sentinel]) >= 2 }))
	}
	for i, ch := range chans {
		got := rec.count(ch)
		if i == sentinel {
			got--
		}
		if subscribed[i] {
			assert.Equal(t, 1, got, "subscribed channel %s", ch)
		} else {
			assert.Zero(t, got, "unsubscribed channel %s", ch)
		}
	}
}
