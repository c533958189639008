package centrifugebroker

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
)

// The adapter's own cost per message, apart from Centrifuge's and the
// engine's: run with -benchmem. The Publish benchmarks include the engine
// and a Redis round trip (the on-demand cluster); the others need no Redis.

// benchPayload is the payload size of shardbench's centrifuge scenario.
var benchPayload = make([]byte, 256)

// BenchmarkEncodePublication encodes into a reused buffer, as Publish
// does with framePool.
func BenchmarkEncodePublication(b *testing.B) {
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = appendPublication(buf[:0], benchPayload, centrifuge.PublishOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// nopEvents is a BrokerEventHandler that drops everything.
type nopEvents struct{ n atomic.Uint64 }

func (h *nopEvents) HandlePublication(string, *centrifuge.Publication, centrifuge.StreamPosition, bool, *centrifuge.Publication) error {
	h.n.Add(1)
	return nil
}
func (h *nopEvents) HandleJoin(string, *centrifuge.ClientInfo) error  { return nil }
func (h *nopEvents) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

// BenchmarkDeliver decodes a received frame and hands it to Centrifuge (a
// handler that does nothing): the receiving side of one message.
func BenchmarkDeliver(b *testing.B) {
	plain, err := encodePublication(benchPayload, centrifuge.PublishOptions{})
	if err != nil {
		b.Fatal(err)
	}
	stored, err := (&protocol.Publication{Data: benchPayload, Time: 1}).MarshalCF()
	if err != nil {
		b.Fatal(err)
	}
	positioned := encodePositioned(centrifuge.StreamPosition{Offset: 12345, Epoch: "k3bfx0ab"}, false, nil, stored)
	for _, tc := range []struct {
		name  string
		frame []byte
	}{{"plain", plain}, {"positioned", positioned}} {
		b.Run(tc.name, func(b *testing.B) {
			br := &Broker{control: DefaultControlChannel}
			var h centrifuge.BrokerEventHandler = &nopEvents{}
			br.events.Store(&h)
			m := shardcast.Message{Channel: "chat", Payload: tc.frame, PublishedAt: time.Now()}
			for b.Loop() {
				br.deliver(m)
			}
			if br.badFrames.count.Load() != 0 {
				b.Fatal("frame dropped")
			}
		})
	}
}

// BenchmarkPublish publishes through a Broker on the on-demand cluster
// from parallel goroutines, to 120 channels, without and with history.
func BenchmarkPublish(b *testing.B) {
	node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelNone,
		Metrics: centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()}})
	if err != nil {
		b.Fatal(err)
	}
	br, err := New(node, Config{Cluster: &cluster.Config{Addrs: redistest.OnDemandCluster()}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(b.Context())
	channels := make([]string, 120)
	for i := range channels {
		channels[i] = "bench:" + strconv.Itoa(i)
	}
	for _, tc := range []struct {
		name string
		opts centrifuge.PublishOptions
	}{
		{"plain", centrifuge.PublishOptions{}},
		{"history", centrifuge.PublishOptions{HistorySize: 100, HistoryTTL: time.Minute}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var next atomic.Uint64
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ch := channels[next.Add(1)%uint64(len(channels))]
					if _, err := br.Publish(ch, benchPayload, tc.opts); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
