package shardcastprom_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// Collect after Close: neither engine's collector may panic, hang or fail
// the scrape.
func TestCollectAfterClose(t *testing.T) {
	s1 := redistest.StartStandalone(t)
	sb, err := sharded.New(sharded.Config{Addrs: []string{s1.Addr()},
		Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
	if err != nil {
		t.Fatal(err)
	}
	pubSub(t, sb, channelNames("closed-s", 5), 2)
	cl := redistest.StartCluster(t, 1, 0)
	cb, err := cluster.New(cluster.Config{Addrs: cl.Seeds(), Partitions: 16,
		Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
	if err != nil {
		t.Fatal(err)
	}
	pubSub(t, cb, channelNames("closed-c", 5), 2)
	_ = sb.Close()
	_ = cb.Close()
	gather(t, shardcastprom.NewCollector(sb, shardcastprom.Options{Partitions: true, NativeHistograms: true}))
	gather(t, shardcastprom.NewCollector(cb, shardcastprom.Options{Partitions: true, NativeHistograms: true}))
}

// Scrapes running while the broker publishes, delivers and records events.
func TestConcurrentCollect(t *testing.T) {
	s1, s2 := redistest.StartStandalone(t), redistest.StartStandalone(t)
	var events shardcastprom.Events
	b, err := sharded.New(sharded.Config{Addrs: []string{s1.Addr(), s2.Addr()},
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: events.OnEvent}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(shardcastprom.NewCollector(b, shardcastprom.Options{Events: &events, NativeHistograms: true}))
	ctx := context.Background()
	chans := channelNames("conc", 20)
	if err := b.Subscribe(ctx, chans...); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 20 {
				if _, err := reg.Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for r := range 200 {
		if err := b.Publish(ctx, chans[r%len(chans)], []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// Two brokers in one registry; one collector registered twice.
func TestTwoBrokersOneRegistry(t *testing.T) {
	s1 := redistest.StartStandalone(t)
	mk := func() *sharded.Broker {
		b, err := sharded.New(sharded.Config{Addrs: []string{s1.Addr()},
			Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b1, b2 := mk(), mk()
	reg := prometheus.NewPedanticRegistry()
	c1 := shardcastprom.NewCollector(b1, shardcastprom.Options{ConstLabels: prometheus.Labels{"broker": "a"}})
	reg.MustRegister(c1, shardcastprom.NewCollector(b2, shardcastprom.Options{ConstLabels: prometheus.Labels{"broker": "b"}}))
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(c1); !errors.As(err, &are) {
		t.Errorf("second Register = %v", err)
	}
	if err := reg.Register(shardcastprom.NewCollector(b2, shardcastprom.Options{ConstLabels: prometheus.Labels{"broker": "a"}})); err == nil {
		t.Error("colliding collector registered")
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c1); n == 0 {
		t.Error("nothing")
	}
}
