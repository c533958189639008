package sharded

import (
	"bufio"
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlowHandlerDropsAndKeepsDraining publishes a burst far larger than
// the instance lets a subscriber fall behind by, to a broker whose handler
// is stuck: the broker drops and reports instead of buffering, keeps
// reading the socket so Redis never disconnects it, and its memory stays
// bounded. A raw subscriber that stops reading is disconnected by the same
// burst, which shows the burst is big enough to matter.
func TestSlowHandlerDropsAndKeepsDraining(t *testing.T) {
	const (
		channels = 8
		messages = 12_000
		size     = 2 << 10 // 24 MB in all
	)
	// A subscriber more than 4 MB behind is disconnected at once.
	s := redistest.StartStandalone(t, redistest.WithArgs("--client-output-buffer-limit", "pubsub 4mb 0 0"))
	ctx := context.Background()
	gate := make(chan struct{})
	var evs events
	sub := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{
		Handler:   func(shardcast.Message) { <-gate },
		OnEvent:   evs.Add,
		Workers:   2,
		QueueSize: 16,
	}})
	// Cleanups run last-in first-out: open the gate before Close waits for
	// the handlers.
	opened := false
	openGate := func() {
		if !opened {
			opened = true
			close(gate)
		}
	}
	t.Cleanup(openGate)
	pub := newBroker(t, Config{Addrs: addrs(s)})
	chans := channelNames("burst:", channels)
	require.NoError(t, sub.Subscribe(ctx, chans...))
	subID := pubsubClientID(t, s, "")

	lagger := dialLagger(t, s, chans)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	payload := []byte(strings.Repeat("x", size))
	burst := make([]string, messages)
	for i := range burst {
		burst[i] = chans[i%channels]
	}
	publishAll(t, pub, burst, func(string) []byte { return payload })
	waitFor(t, "the subscriber to read the whole burst", func() bool { return sub.Stats().Received == messages })

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	// Queues hold 2×16 messages of 2 KiB; keeping the burst would take 24 MB.
	t.Logf("live heap grew by %d bytes; dropped %d of %d", grown, sub.Stats().Dropped, messages)
	assert.Less(t, grown, int64(8<<20), "live heap grew by %d bytes during the burst", grown)

	st := sub.Stats()
	// Nothing is held beyond the queues: per worker, the batch it took
	// (at most a queue's worth, one of them in the stuck handler) and a
	// full queue; every other message was dropped.
	assert.GreaterOrEqual(t, st.Dropped, uint64(messages-2*(16+16)))
	assert.LessOrEqual(t, st.Dropped, uint64(messages))
	waitFor(t, "EventDropped to account for every drop", func() bool {
		var n uint64
		for _, ev := range evs.Of(shardcast.EventDropped) {
			n += ev.Count
		}
		return n == sub.Stats().Dropped
	})
	for _, ev := range evs.Of(shardcast.EventDropped) {
		assert.Subset(t, chans, ev.Channels)
	}

	// The subscriber was never disconnected: same connection, no reconnect,
	// no interruption. The raw subscriber that stopped reading was.
	assert.Zero(t, sub.Stats().Reconnects)
	assert.Empty(t, evs.Of(shardcast.EventInterrupted))
	assert.Equal(t, subID, pubsubClientID(t, s, ""), "the broker's subscribe connection survived")
	waitFor(t, "Redis to disconnect the raw subscriber that stopped reading", func() bool {
		return !hasClient(t, s, "lagger")
	})
	_ = lagger.Close()

	// Once the handler moves again, everything accepted is handled.
	openGate()
	waitFor(t, "queued messages handled", func() bool {
		st := sub.Stats()
		return st.Delivered+st.Dropped == st.Received
	})
	require.NoError(t, pub.Publish(ctx, chans[1], []byte("after")))
	waitFor(t, "delivery after the burst", func() bool {
		st := sub.Stats()
		return st.Received == messages+1 && st.Delivered+st.Dropped == st.Received
	})
}

// dialLagger opens a raw connection named "lagger" that subscribes to
// channels and then never reads again.
func dialLagger(t *testing.T, s *redistest.Server, channels []string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	// Linux grows a loopback receive buffer up to tens of MB, which would
	// swallow the burst; a small fixed one leaves it to Redis's buffer.
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(16<<10))
	_, err = c.Write([]byte("CLIENT SETNAME lagger\r\nSUBSCRIBE " + strings.Join(channels, " ") + "\r\nPING\r\n"))
	require.NoError(t, err)
	// Read up to the PING's reply, so every subscription is in place
	// before the burst.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitTimeout)))
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if line == "pong\r\n" {
			break
		}
	}
	require.True(t, hasClient(t, s, "lagger"))
	return c
}

// pubsubClientID returns the id of the one subscribed client named name.
func pubsubClientID(t *testing.T, s *redistest.Server, name string) string {
	t.Helper()
	var ids []string
	clients, err := s.ClientList(context.Background())
	require.NoError(t, err)
	for _, c := range clients {
		if c["sub"] != "0" && c["name"] == name {
			ids = append(ids, c["id"])
		}
	}
	require.Len(t, ids, 1, "subscribed clients named %q: %v", name, clients)
	return ids[0]
}

func hasClient(t *testing.T, s *redistest.Server, name string) bool {
	t.Helper()
	clients, err := s.ClientList(context.Background())
	require.NoError(t, err)
	for _, c := range clients {
		if c["name"] == name {
			return true
		}
	}
	return false
}
