package shardcastprom_test

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/shardcast/shardcast/cluster"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
)

// TestEventKindsExportedFromStart: every kind a broker raises is exported
// at 0 before its first event, so that increase() sees that first event;
// a re-layout raises EventRelayout.
func TestEventKindsExportedFromStart(t *testing.T) {
	var events shardcastprom.Events
	seeds, agr, b := relayoutBroker(t, "promevents:", events.OnEvent)
	c := shardcastprom.NewCollector(b, shardcastprom.Options{Events: &events})
	before := gather(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := cluster.Relayout(ctx, cluster.RelayoutConfig{Addrs: seeds, Agreement: agr, Partitions: 32}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return len(gather(t, c)["shardcast_events_total"].GetMetric()) > len(before["shardcast_events_total"].GetMetric()) ||
			hasKind(before, "relayout")
	}, "a relayout event")
	for _, m := range gather(t, c)["shardcast_events_total"].GetMetric() {
		kind := m.GetLabel()[0].GetValue()
		if !hasKind(before, kind) {
			t.Errorf("kind %q (now %v) was not exported before its first event", kind, m.GetCounter().GetValue())
		}
	}
}

func hasKind(mfs map[string]*dto.MetricFamily, kind string) bool {
	for _, m := range mfs["shardcast_events_total"].GetMetric() {
		if hasLabel(m, "kind", kind) {
			return true
		}
	}
	return false
}
