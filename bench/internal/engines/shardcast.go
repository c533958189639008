package engines

import (
	"context"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

func init() {
	register(Kind{Name: "shardcast", New: newSharded})
	// The opt-in PublishAsync: each publisher goroutine keeps a window of
	// calls in flight (see throughput).
	register(Kind{Name: "shardcast-async", New: newShardedAsync})
	register(Kind{Name: "shardcast-cluster", Cluster: true, New: newCluster})
}

func options(tu Tuning, recv Recv) shardcast.Options {
	o := shardcast.Options{
		Workers:        tu.Workers,
		SubscribeBatch: tu.SubscribeBatch,
		ReusePayloads:  tu.ReusePayloads,
		Handler:        func(m shardcast.Message) { recv(m.Channel, m.Payload, m.PublishedAt) },
	}
	if tu.OnEvent != nil {
		o.OnEvent = func(e shardcast.Event) { tu.OnEvent(e.Kind.String(), time.Now()) }
	}
	return o
}

type shardcastEngine struct{ shardcast.Broker }

func (e shardcastEngine) Subscribe(ctx context.Context, channels []string) error {
	return e.Broker.Subscribe(ctx, channels...)
}

func newSharded(t Target, tu Tuning, recv Recv) (Engine, error) {
	if len(t.Standalone) == 0 {
		return nil, errNoTarget
	}
	b, err := sharded.New(sharded.Config{Addrs: t.Standalone, Options: options(tu, recv)})
	if err != nil {
		return nil, err
	}
	if tu.Stats != nil {
		*tu.Stats = func() (int, uint64) { s := b.Stats(); return s.Channels, s.Reconnects }
	}
	return shardcastEngine{b}, nil
}

func newCluster(t Target, tu Tuning, recv Recv) (Engine, error) {
	return NewClusterOn(t, tu, recv, cluster.Masters)
}

// NewClusterOn is the shardcast-cluster engine (128 partitions) with
// cluster.Config.SubscribeOn set to on.
func NewClusterOn(t Target, tu Tuning, recv Recv, on cluster.SubscribeOn) (Engine, error) {
	if len(t.Cluster) == 0 {
		return nil, errNoTarget
	}
	b, err := cluster.New(cluster.Config{Addrs: t.Cluster, Partitions: 128, SubscribeOn: on, Options: options(tu, recv)})
	if err != nil {
		return nil, err
	}
	if tu.Stats != nil {
		*tu.Stats = func() (int, uint64) { s := b.Stats(); return s.Channels, s.Reconnects }
	}
	return shardcastEngine{b}, nil
}

// AsyncEngine is an Engine that can also publish without waiting for the
// reply (shardcast.AsyncPublisher); throughput drives it with a window of
// calls in flight per publisher.
type AsyncEngine interface {
	Engine
	PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error
}

// shardcastAsync is the sharded engine driven through PublishAsync.
type shardcastAsync struct {
	shardcastEngine
	ap shardcast.AsyncPublisher
}

// PublishAsync is the broker's shardcast.AsyncPublisher.PublishAsync.
func (e shardcastAsync) PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error {
	return e.ap.PublishAsync(ctx, channel, payload, done)
}

func newShardedAsync(t Target, tu Tuning, recv Recv) (Engine, error) {
	e, err := newSharded(t, tu, recv)
	if err != nil {
		return nil, err
	}
	se := e.(shardcastEngine)
	return shardcastAsync{shardcastEngine: se, ap: se.Broker.(shardcast.AsyncPublisher)}, nil
}

// AsyncOf returns e's PublishAsync when e is a shardcast engine, whatever
// its kind: a scenario that wants the asynchronous form for its own
// bookkeeping (the fleet's probes) asks for it, while the throughput
// rows keep the form their engine's name says.
func AsyncOf(e Engine) (AsyncEngine, bool) {
	switch e := e.(type) {
	case shardcastAsync:
		return e, true
	case shardcastEngine:
		if ap, ok := e.Broker.(shardcast.AsyncPublisher); ok {
			return shardcastAsync{shardcastEngine: e, ap: ap}, true
		}
	}
	return nil, false
}
