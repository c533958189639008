package sharded

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeliversEveryChannel subscribes one broker to 10,000 channels and
// publishes one message on each from another broker, on 1 and on 4
// instances: every channel delivers exactly its own payload, and each
// instance carries its fair share of the channels.
func TestDeliversEveryChannel(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) {
			const total = 10_000
			servers := startServers(t, n)
			rec := newRecorder()
			sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle}})
			pub := newBroker(t, Config{Addrs: addrs(servers...)})
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

			publishAll(t, pub, chans, payloadOf)
			waitFor(t, "every channel to deliver", func() bool { return len(rec.missing(chans, 1)) == 0 })
			for _, ch := range chans {
				msgs := rec.get(ch)
				require.Len(t, msgs, 1, "channel %s", ch)
				require.Equal(t, payloadOf(ch), msgs[0].Payload)
			}
			st := sub.Stats()
			assert.EqualValues(t, total, st.Received)
			assert.Zero(t, st.Dropped)
			assert.Zero(t, st.BadFrames)
			assert.EqualValues(t, total, pub.Stats().Published)
		})
	}
}

// TestPerChannelOrder publishes 1..N on a few channels at once, one
// goroutine per channel: the handler sees every channel's sequence in
// order, with no gap and no repeat.
func TestPerChannelOrder(t *testing.T) {
	const (
		channels = 6
		perChan  = 2000
	)
	servers := startServers(t, 2)
	rec := newRecorder()
	// Few workers so that channels share workers and queues.
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle, Workers: 2}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	chans := channelNames("order:", channels)
	require.NoError(t, sub.Subscribe(context.Background(), chans...))

	var wg sync.WaitGroup
	errs := make(chan error, channels)
	for _, ch := range chans {
		wg.Go(func() {
			for i := 1; i <= perChan; i++ {
				if err := pub.Publish(context.Background(), ch, fmt.Appendf(nil, "%d", i)); err != nil {
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
	waitFor(t, "every message", func() bool { return len(rec.missing(chans, perChan)) == 0 })
	for _, ch := range chans {
		msgs := rec.get(ch)
		require.Len(t, msgs, perChan)
		for i, m := range msgs {
			require.Equal(t, fmt.Sprint(i+1), string(m.Payload), "channel %s, message %d", ch, i)
		}
	}
	assert.Zero(t, sub.Stats().Dropped)
}

// TestPublishedAt checks the envelope's timestamp, and that raw mode
// delivers the bytes unchanged with no timestamp.
func TestPublishedAt(t *testing.T) {
	servers := startServers(t, 1)
	ctx := context.Background()
	// Bytes an envelope decoder might trip on.
	payload := []byte{0, 1, 2, 0xff, '{', '}', 0xc3, 0x28}

	t.Run("envelope", func(t *testing.T) {
		rec := newRecorder()
		sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle}})
		pub := newBroker(t, Config{Addrs: addrs(servers...)})
		require.NoError(t, sub.Subscribe(ctx, "at"))
		before := time.Now()
		require.NoError(t, pub.Publish(ctx, "at", payload))
		waitFor(t, "the message", func() bool { return rec.count("at") == 1 })
		after := time.Now()
		m := rec.get("at")[0]
		assert.Equal(t, payload, m.Payload)
		// The envelope may round the publisher's clock, but not by more
		// than a millisecond.
		assert.WithinRange(t, m.PublishedAt, before.Add(-time.Millisecond), after.Add(time.Millisecond))
		assert.Zero(t, sub.Stats().BadFrames)
	})

	t.Run("raw", func(t *testing.T) {
		rec := newRecorder()
		raw := shardcast.Options{Handler: rec.handle, Raw: true}
		sub := newBroker(t, Config{Addrs: addrs(servers...), Options: raw})
		pub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Raw: true}})
		require.NoError(t, sub.Subscribe(ctx, "raw"))
		require.NoError(t, pub.Publish(ctx, "raw", payload))
		// A foreign publisher's message arrives as it was sent.
		_, err := servers[0].Do(ctx, "PUBLISH", "raw", "from redis-cli")
		require.NoError(t, err)
		waitFor(t, "both messages", func() bool { return rec.count("raw") == 2 })
		msgs := rec.get("raw")
		assert.Equal(t, payload, msgs[0].Payload)
		assert.True(t, msgs[0].PublishedAt.IsZero())
		assert.Equal(t, "from redis-cli", string(msgs[1].Payload))
		assert.True(t, msgs[1].PublishedAt.IsZero())
	})

	t.Run("foreign publisher without raw", func(t *testing.T) {
		rec := newRecorder()
		sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle}})
		require.NoError(t, sub.Subscribe(ctx, "foreign"))
		_, err := servers[0].Do(ctx, "PUBLISH", "foreign", "plain text")
		require.NoError(t, err)
		waitFor(t, "the message", func() bool { return rec.count("foreign") == 1 })
		m := rec.get("foreign")[0]
		assert.Equal(t, "plain text", string(m.Payload))
		assert.True(t, m.PublishedAt.IsZero())
		assert.EqualValues(t, 1, sub.Stats().BadFrames)
	})
}

// TestFingerprint: brokers that list the same addresses in the same order
// agree; any other list, including a reordering, does not.
func TestFingerprint(t *testing.T) {
	servers := startServers(t, 2)
	a, b := servers[0].Addr(), servers[1].Addr()
	fp := func(addrs ...string) string { return newBroker(t, Config{Addrs: addrs}).Fingerprint() }

	same := fp(a, b)
	assert.NotEmpty(t, same)
	assert.Equal(t, same, fp(a, b))
	// A URL naming the same instance places channels the same way.
	assert.Equal(t, same, fp("redis://"+a, "redis://"+b))
	assert.NotEqual(t, same, fp(b, a))
	assert.NotEqual(t, same, fp(a))
	assert.NotEqual(t, same, fp(a, b, a))
}
