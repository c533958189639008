package centrifugebroker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	gocent "github.com/centrifugal/centrifuge-go"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// historyChannelPrefix starts the names of channels whose subscriptions
// the test nodes make recoverable.
const historyChannelPrefix = "hist-"

// publishKept publishes data to ch from nd with history, retrying while
// the channel's Redis server is failing over; the idempotency key (the
// data) makes a retry of a publish that did run harmless.
func publishKept(t *testing.T, nd *testNode, ch, data string) centrifuge.PublishResult {
	t.Helper()
	var res centrifuge.PublishResult
	var err error
	waitFor(t, func() bool {
		res, err = nd.node.Publish(ch, []byte(data), centrifuge.WithHistory(100, time.Minute), centrifuge.WithIdempotencyKey(data))
		return err == nil
	}, func() string { return fmt.Sprintf("publish %q to %s: %v", data, ch, err) })
	return res
}

// waitReceived waits until every one of subs received data.
func waitReceived(t *testing.T, data func(ch string) string, subs map[string][]*testSub) {
	t.Helper()
	var missing []string
	waitFor(t, func() bool {
		missing = missing[:0]
		for ch, ss := range subs {
			for _, s := range ss {
				if !s.has(data(ch)) {
					missing = append(missing, ch)
				}
			}
		}
		return len(missing) == 0
	}, func() string {
		return fmt.Sprintf("publications missing on %d subscriptions, e.g. %v", len(missing), head(missing, 5))
	})
}

// TestRecoveryAfterReconnect: a client that was disconnected while
// publications went out reconnects, recovers, and receives exactly what
// it missed, in order, with Recovered set.
func TestRecoveryAfterReconnect(t *testing.T) {
	for name, config := range engines(t) {
		t.Run(name, func(t *testing.T) {
			nodes := startNodes(t, 3, config())
			a, b, c := nodes[0], nodes[1], nodes[2]
			// Unique: the cluster is shared, and its history outlives a run.
			ch := historyChannelPrefix + "reconnect-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			cl := connect(t, a, "rita")
			sub := cl.subscribe(t, ch)[0]
			var want []string
			publish := func(nd *testNode, n int) {
				for range n {
					data := ch + "-" + strconv.Itoa(len(want)+1)
					res := publishKept(t, nd, ch, data)
					want = append(want, data)
					require.Equal(t, uint64(len(want)), res.Offset)
				}
				waitFor(t, func() bool { return len(sub.received()) >= len(want) },
					func() string { return fmt.Sprintf("received %q, want %q", sub.received(), want) })
			}
			publish(b, 2)
			require.NoError(t, cl.c.Disconnect())
			waitFor(t, func() bool { return cl.c.State() == gocent.StateDisconnected }, func() string { return "client to disconnect" })
			for range 5 {
				data := ch + "-" + strconv.Itoa(len(want)+1)
				publishKept(t, c, ch, data)
				want = append(want, data)
			}
			require.NoError(t, cl.c.Connect())
			publish(b, 1)
			assert.Equal(t, want, sub.received())
			ev := sub.subscribedEventsCopy()
			require.Len(t, ev, 2)
			assert.True(t, ev[1].WasRecovering, "resubscribed with its position")
			assert.True(t, ev[1].Recovered, "recovered from history")
		})
	}
}

// TestRecoveryAfterRestart kills and restarts a standalone instance,
// which keeps no data: the streams of its channels start over in new
// epochs, and their clients, unsubscribed with the insufficient-state
// code, resubscribe and are told their position is gone (not recovered,
// new epoch). Channels on the other instance are untouched.
func TestRecoveryAfterRestart(t *testing.T) {
	servers := []*redistest.Server{redistest.StartStandalone(t), redistest.StartStandalone(t)}
	nodes := startNodes(t, 2, Config{Sharded: &sharded.Config{Addrs: []string{servers[0].Addr(), servers[1].Addr()}}})
	a, b := nodes[0], nodes[1]
	channels := make([]string, 8)
	for i := range channels {
		channels[i] = historyChannelPrefix + "restart-" + strconv.Itoa(i)
	}
	e := a.broker.engine.(*sharded.Broker)
	victim := e.Shard(channels[0])
	subs := make(map[string][]*testSub)
	for i, s := range connect(t, a, "rob").subscribe(t, channels...) {
		subs[channels[i]] = []*testSub{s}
	}
	epochs := make(map[string]string)
	for _, ch := range channels {
		epochs[ch] = publishKept(t, b, ch, ch+"/1").Epoch
	}
	waitReceived(t, func(ch string) string { return ch + "/1" }, subs)

	require.NoError(t, servers[victim].Kill())
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, servers[victim].Restart(ctx))

	for _, ch := range channels {
		s := subs[ch][0]
		if e.Shard(ch) != victim {
			continue
		}
		waitFor(t, func() bool { return len(s.subscribedEventsCopy()) >= 2 && s.sub.State() == gocent.SubStateSubscribed },
			func() string { return ch + ": the client to resubscribe" })
		last := s.subscribedEventsCopy()[1]
		assert.True(t, last.WasRecovering && !last.Recovered, "%s: told (%+v)", ch, last)
		require.NotNil(t, last.StreamPosition)
		assert.NotEqual(t, epochs[ch], last.StreamPosition.Epoch, "%s: a new epoch", ch)
		assert.Zero(t, last.StreamPosition.Offset, ch)
	}
	for _, ch := range channels {
		res := publishKept(t, b, ch, ch+"/2")
		if e.Shard(ch) == victim {
			assert.Equal(t, uint64(1), res.Offset, "%s starts over", ch)
		} else {
			assert.Equal(t, centrifuge.StreamPosition{Offset: 2, Epoch: epochs[ch]}, res.StreamPosition, ch)
			assert.Len(t, subs[ch][0].subscribedEventsCopy(), 1, "%s untouched", ch)
		}
	}
	waitReceived(t, func(ch string) string { return ch + "/2" }, subs)
	for _, ch := range channels {
		assert.Equal(t, []string{ch + "/1", ch + "/2"}, subs[ch][0].received(), ch)
	}
}
