package engines

import (
	"context"
	"errors"
	"hash/maphash"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// asyncPubBrokers is how many publishing brokers shardcast-async-4pub
// spreads its publishes over.
const asyncPubBrokers = 4

func init() {
	// An experiment, in no scenario's default list: PublishAsync over
	// several publish connections per instance (one per publishing broker,
	// chosen by channel hash so that each channel keeps one connection and
	// its order), to see whether one connection's reader/writer pair is a
	// serial bound (it was not, at GOMAXPROCS 1 or on every core: see the
	// gap note of issue 15's PublishAsync rows).
	register(Kind{Name: "shardcast-async-4pub", New: newShardedAsyncPubs})
}

// shardcastAsyncPubs subscribes with one broker and publishes through
// others.
type shardcastAsyncPubs struct {
	shardcastEngine
	pubs []shardcast.AsyncPublisher
	seed maphash.Seed
}

// PublishAsync is the PublishAsync of the publishing broker of channel.
func (e *shardcastAsyncPubs) PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error {
	i := maphash.String(e.seed, channel) % uint64(len(e.pubs))
	return e.pubs[i].PublishAsync(ctx, channel, payload, done)
}

// Close closes the publishing brokers and the subscribing one.
func (e *shardcastAsyncPubs) Close() error {
	var errs []error
	for _, p := range e.pubs {
		errs = append(errs, p.(shardcast.Broker).Close())
	}
	return errors.Join(append(errs, e.shardcastEngine.Close())...)
}

func newShardedAsyncPubs(t Target, tu Tuning, recv Recv) (Engine, error) {
	e, err := newSharded(t, tu, recv)
	if err != nil {
		return nil, err
	}
	m := &shardcastAsyncPubs{shardcastEngine: e.(shardcastEngine), seed: maphash.MakeSeed()}
	for range asyncPubBrokers {
		b, err := sharded.New(sharded.Config{Addrs: t.Standalone})
		if err != nil {
			_ = m.Close()
			return nil, err
		}
		m.pubs = append(m.pubs, b)
	}
	return m, nil
}
