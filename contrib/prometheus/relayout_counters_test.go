package shardcastprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
	"github.com/shardcast/shardcast/redistest"
)

// TestPartitionCountersAcrossPrefixRelayout: a re-layout that changes the
// prefix moves every partition to the broker's other bank of paths. The
// partition_*_total counters must still be counters: what a Prometheus
// increase() computes between two scrapes (a decrease read as a reset)
// can be no more than the messages the broker read in between.
func TestPartitionCountersAcrossPrefixRelayout(t *testing.T) {
	seeds, agr, b := relayoutBroker(t, "promrelayout:", nil)
	c := shardcastprom.NewCollector(b, shardcastprom.Options{Partitions: true})
	chans := channelNames("relayout", 30)
	pubSub(t, b, chans, 10) // 300 messages under prefix ""

	// scrape returns the partition counters and Stats.Received read just
	// before and just after them.
	scrape := func() (out map[string]float64, before, after uint64) {
		before = b.Stats().Received
		out = map[string]float64{}
		for _, m := range gather(t, c)["shardcast_partition_received_total"].GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
		return out, before, b.Stats().Received
	}
	relayout := func(prefix string) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := cluster.Relayout(ctx, cluster.RelayoutConfig{Addrs: seeds, Agreement: agr, Prefix: &prefix}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, before, after map[string]float64, read uint64) {
		var inc float64
		for p, v := range after {
			if v >= before[p] {
				inc += v - before[p]
			} else {
				inc += v // a reset
			}
		}
		t.Logf("%s: partition_received_total %v -> %v; increase %v, messages read %d", step, sumOf(before), sumOf(after), inc, read)
		if inc > float64(read) {
			t.Errorf("%s: partition_received_total rose by %v, but the broker read only %d messages", step, inc, read)
		}
	}
	s0, r0, _ := scrape()
	relayout("b:")
	pubSub(t, b, chans, 1)
	s1, r1, r1end := scrape()
	check("to prefix b:", s0, s1, r1end-r0)
	relayout("")
	s2, _, r2end := scrape()
	check("back to prefix \"\"", s1, s2, r2end-r1)
}

func sumOf(m map[string]float64) (s float64) {
	for _, v := range m {
		s += v
	}
	return s
}

// relayoutBroker starts a 1-master cluster and a subscribing broker of
// app on it with 16 partitions and a 50 ms heartbeat, for re-layout tests;
// onEvent may be nil.
func relayoutBroker(t *testing.T, app string, onEvent func(shardcast.Event)) ([]string, shardcast.Agreement, *cluster.Broker) {
	t.Helper()
	cl := redistest.StartCluster(t, 1, 0)
	agr := shardcast.Agreement{App: app, Heartbeat: 50 * time.Millisecond}
	b, err := cluster.New(cluster.Config{Addrs: cl.Seeds(), Partitions: 16, Agreement: agr,
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: onEvent}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return cl.Seeds(), agr, b
}
