package sharded

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayoutAtScale moves 20 brokers from 2 to 3 instances while each
// publishes numbered messages without pause: 100,000 channels with
// SHARDCAST_HEAVY set, 10,000 otherwise (so that it runs under -race on
// a shared two-core machine). Broker i subscribes every 20th channel from
// the i-th, and publishes to the channels of broker i+1 (from 4 goroutines), so that every
// message has one subscriber and every broker both publishes and
// subscribes moving channels. Every accepted message must arrive once and
// in order; it logs the figures, the phases and the most messages a
// broker held back at the switch.
func TestRelayoutAtScale(t *testing.T) {
	const brokers = 20
	n := 10_000
	if os.Getenv(brokertest.HeavyEnv) != "" {
		n = 100_000
	}
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	channels := channelNames("scale-", n)
	slice := func(i int) []string {
		var out []string
		for k := i % brokers; k < n; k += brokers {
			out = append(out, channels[k])
		}
		return out
	}
	owner := make(map[string]int, n)
	for k, ch := range channels {
		owner[ch] = k % brokers
	}
	var (
		bs   []*Broker
		subs []*brokertest.DeliveryLog
		evs  []*events
		pubs []*brokertest.LoggedPublisher
	)
	setup := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	for i := range brokers {
		sub, ev := brokertest.NewDeliveryLog(), &events{}
		b := newBroker(t, Config{Addrs: ab, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat},
			Options: shardcast.Options{Handler: sub.Handle, OnEvent: ev.Add, QueueSize: 1 << 16}})
		require.NoError(t, b.Subscribe(ctx, slice(i)...))
		bs, subs, evs = append(bs, b), append(subs, sub), append(evs, ev)
	}
	t.Logf("%d brokers subscribed %d channels in %v", brokers, n, time.Since(setup).Round(time.Millisecond))
	stop := make(chan struct{})
	published := func() int64 {
		var k int64
		for _, p := range pubs {
			k += p.Accepted()
		}
		return k
	}
	// Each broker publishes from several goroutines, each to its own
	// share of the channels, so that its publishes pipeline.
	const perBroker = 4
	done := make(chan struct{}, brokers*perBroker)
	for i, b := range bs {
		chans := slice(i + 1)
		for g := range perBroker {
			p := brokertest.NewLoggedPublisher("p" + strconv.Itoa(i) + "." + strconv.Itoa(g))
			pubs = append(pubs, p)
			var mine []string
			for k := g; k < len(chans); k += perBroker {
				mine = append(mine, chans[k])
			}
			go func() {
				defer func() { done <- struct{}{} }()
				p.Run(b, mine, stop, 5*time.Second)
			}()
		}
	}
	waitMore := func(k int64) {
		target := published() + k
		waitFor(t, "messages published", func() bool { return published() >= target })
	}
	waitMore(int64(n / 2))

	cfg := relayoutConfig(ab[0], abc)
	before, began := published(), time.Now()
	rep, err := Relayout(ctx, cfg)
	took, during := time.Since(began), published()-before
	require.NoError(t, err)
	waitMore(int64(n / 2))
	close(stop)
	for range cap(done) {
		<-done
	}
	brokertest.WaitDelivered(subs, int(published()), waitTimeout)
	fig := brokertest.CheckMessages(pubs, subs, evs, func(sub int, ch string) bool { return owner[ch] == sub }, 0)

	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers  %d barriers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers, p.Barriers)
	}
	peak, moved := 0, 0
	for _, b := range bs {
		peak = max(peak, b.hand.PeakHeld())
	}
	for _, ch := range channels {
		if bs[0].Shard(ch) == 2 {
			moved++
		}
	}
	t.Logf("%d brokers, %d channels (%d moved): re-layout took %v, %d messages published meanwhile; most held back by a broker: %d",
		brokers, n, moved, took.Round(time.Millisecond), during, peak)
	t.Logf("figures: %v", fig)
	for _, s := range fig.Samples {
		t.Log("  ", s)
	}
	assert.NotZero(t, fig.Published)
	assert.Zero(t, fig.Failed, "failed publishes")
	assert.Zero(t, fig.Lost, "lost")
	assert.Zero(t, fig.Duplicates, "duplicates")
	assert.Zero(t, fig.Reordered, "reordered")
	newFP, err := Fingerprint(abc)
	require.NoError(t, err)
	for i, b := range bs {
		assert.Equal(t, newFP, b.Fingerprint(), "broker %d", i)
		assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, evs[i].RelayoutPhases(), "broker %d", i)
		assert.Equal(t, len(slice(i)), b.Stats().Channels, "broker %d wants each channel once", i)
	}
}
