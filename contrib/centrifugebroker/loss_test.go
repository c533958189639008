package centrifugebroker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/centrifugal/centrifuge"
	gocent "github.com/centrifugal/centrifuge-go"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lossChannels is how many channels the loss tests spread over the
// servers, so that every server carries some.
const lossChannels = 60

// TestLossTellsClientsToResubscribe kills the Redis server that carries
// some channels: the clients of exactly those channels, on the node whose
// subscriptions broke, are unsubscribed with the insufficient-state code,
// resubscribe, and receive publications again once Redis is back; the
// clients of other channels are left alone. A client subscribed to the
// channels server-side, which an SDK does not resubscribe, is
// disconnected with the insufficient-state code instead, reconnects and
// receives them again.
func TestLossTellsClientsToResubscribe(t *testing.T) {
	t.Run("cluster master SIGKILL", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 1)
		var victim *redistest.Server
		testLoss(t, Config{Cluster: &cluster.Config{Addrs: c.Seeds()}},
			func(t *testing.T, b *Broker, channels []string) []string {
				ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
				defer cancel()
				l := b.engine.(*cluster.Broker).Layout()
				slot, err := c.Nodes()[0].KeySlots(ctx, l.Key(channels[0]))
				require.NoError(t, err)
				victim, err = c.MasterOfSlot(ctx, slot[0])
				require.NoError(t, err)
				var hit []string
				for _, ch := range channels {
					if owner, err := c.MasterOfSlot(ctx, l.Slot(l.Partition(ch))); err == nil && owner == victim {
						hit = append(hit, ch)
					}
				}
				return hit
			},
			func(t *testing.T) {
				require.NoError(t, victim.Kill())
				ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
				defer cancel()
				promoted, err := c.WaitFailover(ctx, victim)
				require.NoError(t, err)
				t.Logf("killed master %s, replica %s took over", victim.Addr(), promoted.Addr())
			})
	})
	t.Run("sharded instance SIGKILL and restart", func(t *testing.T) {
		servers := []*redistest.Server{redistest.StartStandalone(t), redistest.StartStandalone(t)}
		var victim *redistest.Server
		testLoss(t, Config{Sharded: &sharded.Config{Addrs: []string{servers[0].Addr(), servers[1].Addr()}}},
			func(t *testing.T, b *Broker, channels []string) []string {
				e := b.engine.(*sharded.Broker)
				victim = servers[e.Shard(channels[0])]
				var hit []string
				for _, ch := range channels {
					if e.Shard(ch) == e.Shard(channels[0]) {
						hit = append(hit, ch)
					}
				}
				return hit
			},
			func(t *testing.T) {
				require.NoError(t, victim.Kill())
				ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
				defer cancel()
				require.NoError(t, victim.Restart(ctx))
			})
	})
}

// testLoss runs the loss scenario on cfg. affected returns the channels
// the server that kill brings down carries; kill brings it down and waits
// until its channels can be served again.
func testLoss(t *testing.T, cfg Config, affected func(*testing.T, *Broker, []string) []string, kill func(*testing.T)) {
	nodes := startNodes(t, 2, cfg)
	a, b := nodes[0], nodes[1]
	channels := make([]string, lossChannels)
	for i := range channels {
		channels[i] = "loss-" + strconv.Itoa(i)
	}
	hit := affected(t, a.broker, channels)
	require.NotEmpty(t, hit)
	require.Less(t, len(hit), len(channels), "some channels must stay on healthy servers")

	// Two clients on node A, subscribed to every channel, and one more
	// subscribed to them server-side; node B publishes.
	subs := make(map[string][]*testSub)
	for _, user := range []string{"ann", "abe"} {
		for i, s := range connect(t, a, user).subscribe(t, channels...) {
			subs[channels[i]] = append(subs[channels[i]], s)
		}
	}
	a.subscribeOnConnect("sam", channels)
	sam := connect(t, a, "sam")
	everyoneGets := func(data string) {
		t.Helper()
		var missing []string
		waitFor(t, func() bool {
			// Publish again while some miss it: B's route to a moved
			// channel may still be settling.
			missing = missing[:0]
			for _, ch := range channels {
				got := slices.Contains(sam.serverReceived(ch), data)
				for _, s := range subs[ch] {
					got = got && s.has(data)
				}
				if !got {
					missing = append(missing, ch)
					_, _ = b.node.Publish(ch, []byte(data))
				}
			}
			return len(missing) == 0
		}, func() string {
			return fmt.Sprintf("%q not received on %d channels, e.g. %v", data, len(missing), head(missing, 5))
		})
	}
	everyoneGets("before")

	kill(t)

	// The clients of the affected channels were told to resubscribe, did,
	// and are subscribed again.
	waitFor(t, func() bool {
		for _, ch := range hit {
			for _, s := range subs[ch] {
				_, _, subscribing, subscribed := s.events()
				if !slices.Contains(subscribing, centrifuge.UnsubscribeCodeInsufficient) || subscribed < 2 || s.sub.State() != gocent.SubStateSubscribed {
					return false
				}
			}
		}
		return true
	}, func() string {
		var s []string
		for _, ch := range hit {
			_, _, subscribing, subscribed := subs[ch][0].events()
			s = append(s, fmt.Sprintf("%s: codes %v, subscribed %d times, %s", ch, subscribing, subscribed, subs[ch][0].sub.State()))
		}
		return "affected clients to be unsubscribed with 2500 and resubscribe: " + fmt.Sprint(head(s, 5))
	})
	waitFor(t, func() bool {
		return slices.Contains(sam.reconnectCodes(), centrifuge.DisconnectInsufficientState.Code) && sam.c.State() == gocent.StateConnected
	}, func() string {
		return fmt.Sprintf("the server-side subscriber to be disconnected with the insufficient-state code and reconnect: codes %v, %s",
			sam.reconnectCodes(), sam.c.State())
	})
	everyoneGets("after")

	// Clients of channels on the healthy servers saw nothing of it.
	for _, ch := range channels {
		if slices.Contains(hit, ch) {
			continue
		}
		for _, s := range subs[ch] {
			_, _, subscribing, subscribed := s.events()
			// Code 0 is the client's own first Subscribe call.
			assert.Equal(t, []uint32{0}, subscribing, "channel %s on a healthy server", ch)
			assert.Equal(t, 1, subscribed, "channel %s on a healthy server", ch)
		}
	}
	st := a.broker.Stats()
	assert.GreaterOrEqual(t, st.Resubscribes, uint64(2*len(hit)), "two clients per affected channel")
	assert.GreaterOrEqual(t, st.Reconnects, uint64(1), "the server-side subscriber")
	t.Logf("%d of %d channels affected; node A: %+v", len(hit), len(channels), st)
}
