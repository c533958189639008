package shardcastprom

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast"
)

// Events counts a broker's events by kind, for shardcast_events_total.
// A broker takes its event hook in its Config, before a Collector over it
// can exist, so the count lives apart: create the Events first, hand its
// OnEvent (or Chain) to the broker's shardcast.Options.OnEvent, and pass it
// to NewCollector in Options.Events. Every kind shardcast.EventKinds lists
// is exported from the start, at 0, so that a rate over it works before
// its first event.
//
// It is shardcast.EventCounter, which the OpenTelemetry instruments count
// with too. The zero value is ready to use; it must not be copied after
// first use.
type Events = shardcast.EventCounter

// collectEvents sends e's count of every kind as one counter of desc.
func collectEvents(e *Events, ch chan<- prometheus.Metric, desc *prometheus.Desc) {
	for _, c := range e.Counts() {
		ch <- constMetric(desc, prometheus.CounterValue, float64(c.Count), c.Kind.String())
	}
}
