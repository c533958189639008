package sharded

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/require"
)

// waitTimeout bounds every wait for a condition; generous because the
// 2-core test machines are shared and run with -race.
const waitTimeout = 20 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// channelNames returns n distinct channel names with the given prefix.
func channelNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// recorder is a Handler that remembers every message per channel.
type recorder struct {
	mu   sync.Mutex
	msgs map[string][]shardcast.Message
}

func newRecorder() *recorder { return &recorder{msgs: make(map[string][]shardcast.Message)} }

func (r *recorder) handle(m shardcast.Message) {
	// The payload may share memory with the network layer: keep a copy.
	m.Payload = append([]byte(nil), m.Payload...)
	r.mu.Lock()
	r.msgs[m.Channel] = append(r.msgs[m.Channel], m)
	r.mu.Unlock()
}

// count returns how many messages channel received.
func (r *recorder) count(channel string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs[channel])
}

// get returns a copy of channel's messages.
func (r *recorder) get(channel string) []shardcast.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]shardcast.Message(nil), r.msgs[channel]...)
}

// missing returns the channels with fewer than n messages.
func (r *recorder) missing(channels []string, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ch := range channels {
		if len(r.msgs[ch]) < n {
			out = append(out, ch)
		}
	}
	return out
}

// reset forgets every message.
func (r *recorder) reset() {
	r.mu.Lock()
	clear(r.msgs)
	r.mu.Unlock()
}

// events collects the events a broker raises.
type events = brokertest.EventLog

// addrs returns the servers' addresses in order.
func addrs(servers ...*redistest.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}

// startServers starts n standalone instances.
func startServers(t testing.TB, n int, opts ...redistest.Option) []*redistest.Server {
	out := make([]*redistest.Server, n)
	for i := range out {
		out[i] = redistest.StartStandalone(t, opts...)
	}
	return out
}

// newBroker builds a broker that is closed when the test ends.
func newBroker(t testing.TB, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// publishAll publishes payload(ch) to every channel from a few goroutines,
// so that rueidis pipelines them, and fails the test on the first error.
func publishAll(t testing.TB, pub *Broker, channels []string, payload func(string) []byte) {
	t.Helper()
	const publishers = 8
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < len(channels); i += publishers {
				if err := pub.Publish(ctx, channels[i], payload(channels[i])); err != nil {
					errs <- fmt.Errorf("publish %s: %w", channels[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// publishUntilAccepted retries one publish until the shard takes it again,
// for the moments after a restart when the publisher is still reconnecting.
func publishUntilAccepted(t testing.TB, pub *Broker, channel string) {
	t.Helper()
	waitFor(t, "publisher to reach "+channel+"'s shard", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return pub.Publish(ctx, channel, []byte("probe")) == nil
	})
}

// pubsubChannels returns how many channels have subscribers on s.
func pubsubChannels(t testing.TB, s *redistest.Server) int {
	t.Helper()
	info, err := s.Info(context.Background(), "stats")
	require.NoError(t, err)
	n, err := strconv.Atoi(info["pubsub_channels"])
	require.NoError(t, err)
	return n
}

// numsub returns PUBSUB NUMSUB channel on s.
func numsub(t testing.TB, s *redistest.Server, channel string) int64 {
	t.Helper()
	reply, err := s.Do(context.Background(), "PUBSUB", "NUMSUB", channel)
	require.NoError(t, err)
	arr, ok := reply.([]any)
	require.True(t, ok, "PUBSUB NUMSUB answered %v", reply)
	require.Len(t, arr, 2)
	n, ok := arr[1].(int64)
	require.True(t, ok, "PUBSUB NUMSUB answered %v", reply)
	return n
}

func payloadOf(ch string) []byte { return []byte("p:" + ch) }

// roundTrip builds a broker from cfg (with a Handler of its own),
// subscribes one channel, publishes to it and waits for the message.
func roundTrip(t *testing.T, cfg Config) {
	t.Helper()
	rec := newRecorder()
	cfg.Options.Handler = rec.handle
	b := newBroker(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, b.Subscribe(ctx, "round-trip"))
	require.NoError(t, b.Publish(ctx, "round-trip", []byte("ok")))
	waitFor(t, "the message", func() bool { return rec.count("round-trip") == 1 })
}
