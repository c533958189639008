package centrifugebroker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecoveryAfterSlotMove moves the slot of some recoverable channels
// to another master, as a resharding does, while a publisher keeps
// publishing to every channel. The channels' history streams and meta
// keys move with the slot, so nothing is lost: every client of a moved
// channel ends with every publication, once each and in order, whether
// it was unsubscribed with the insufficient-state code and recovered from
// the new master or never interrupted; History answers from the new
// master with the stream's old epoch. Clients of channels that stay, on
// the same master or elsewhere, see nothing of it.
func TestRecoveryAfterSlotMove(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	nodes := startNodes(t, 3, Config{Cluster: &cluster.Config{Addrs: c.Seeds()}})
	a, b, pub := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(t.Context(), 4*waitTimeout)
	defer cancel()

	// Channels in one slot, the moved one, and channels elsewhere: some
	// on the same master, some on others.
	l := a.broker.engine.(*cluster.Broker).Layout()
	prefix := historyChannelPrefix + "slotmove-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	slot := l.Slot(l.Partition(prefix + "0"))
	from, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	var moved, stayed, channels []string
	sameMaster := 0
	for i := 0; len(moved) < 3 || len(stayed) < 12; i++ {
		ch := prefix + strconv.Itoa(i)
		s := l.Slot(l.Partition(ch))
		switch {
		case s == slot && len(moved) < 3:
			moved = append(moved, ch)
		case s != slot && len(stayed) < 12:
			owner, err := c.MasterOfSlot(ctx, s)
			require.NoError(t, err)
			if owner == from {
				sameMaster++
			}
			stayed = append(stayed, ch)
		default:
			continue
		}
		channels = append(channels, ch)
	}
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	var to *redistest.Server
	for _, m := range masters {
		if m != from {
			to = m
			break
		}
	}
	require.NotNil(t, to)

	subs := make(map[string][]*testSub)
	for _, cl := range []*testClient{connect(t, a, "ada"), connect(t, b, "ben")} {
		for i, s := range cl.subscribe(t, channels...) {
			subs[channels[i]] = append(subs[channels[i]], s)
		}
	}
	epochs := make(map[string]string)
	for _, ch := range channels {
		epochs[ch] = publishKept(t, pub, ch, ch+"/0").Epoch
	}
	waitReceived(t, func(ch string) string { return ch + "/0" }, subs)

	// The publisher publishes rounds to every channel until told to stop
	// (or maxRounds), each publish retried while the slot is in flight: the
	// idempotency key makes a retry of a publish that ran harmless.
	const maxRounds = 300
	sent := make(map[string][]string)
	for _, ch := range channels {
		sent[ch] = []string{ch + "/0"}
	}
	var rounds atomic.Int64
	stop := make(chan struct{})
	var pubErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 1; r <= maxRounds; r++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, ch := range channels {
				data := ch + "/" + strconv.Itoa(r)
				deadline := time.Now().Add(waitTimeout)
				for {
					_, err := pub.node.Publish(ch, []byte(data), centrifuge.WithHistory(1000, time.Minute), centrifuge.WithIdempotencyKey(data))
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						pubErr = fmt.Errorf("publish %q: %w", data, err)
						return
					}
				}
				sent[ch] = append(sent[ch], data)
			}
			rounds.Store(int64(r))
		}
	}()
	stopped := false
	stopPublisher := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopPublisher()
	waitFor(t, func() bool { return rounds.Load() >= 2 }, func() string { return "two rounds of publications" })

	keys := make(map[string][]string) // channel → stream and meta keys
	for _, ch := range moved {
		keys[ch] = a.broker.history.keys(ch, "")
	}
	require.NoError(t, c.MoveSlot(ctx, slot, to))
	atMove := rounds.Load()
	waitFor(t, func() bool { return rounds.Load() >= atMove+3 || rounds.Load() == maxRounds },
		func() string { return "three rounds after the move" })
	stopPublisher()
	require.NoError(t, pubErr)
	t.Logf("moved slot %d (%d channels) from %s to %s at round %d of %d; %d unmoved channels on %s too",
		slot, len(moved), from.Addr(), to.Addr(), atMove, rounds.Load(), sameMaster, from.Addr())

	// The history keys moved with the slot.
	for _, ch := range moved {
		n, err := to.Do(ctx, append([]string{"EXISTS"}, keys[ch]...)...)
		require.NoError(t, err)
		assert.Equal(t, int64(len(keys[ch])), n, "%s: stream and meta on the new master", ch)
		slots, err := to.KeySlots(ctx, keys[ch]...)
		require.NoError(t, err)
		assert.Equal(t, []uint16{slot, slot}, slots, ch)
		_, err = from.Do(ctx, "EXISTS", keys[ch][0])
		assert.ErrorContains(t, err, "MOVED", "%s: the old master redirects", ch)
	}

	// A last round, from the test: once every client has it, every
	// client must have everything.
	for _, ch := range channels {
		data := ch + "/last"
		publishKept(t, pub, ch, data)
		sent[ch] = append(sent[ch], data)
	}
	waitReceived(t, func(ch string) string { return ch + "/last" }, subs)
	interrupted := 0
	for _, ch := range channels {
		for _, s := range subs[ch] {
			assert.Equal(t, sent[ch], s.received(), "%s: all, once, in order", ch)
			ev := s.subscribedEventsCopy()
			_, _, codes, _ := s.events()
			if !slices.Contains(moved, ch) {
				assert.NotContains(t, codes, uint32(centrifuge.UnsubscribeCodeInsufficient), "%s: not moved", ch)
				assert.Len(t, ev, 1, "%s: not moved", ch)
				continue
			}
			if !slices.Contains(codes, uint32(centrifuge.UnsubscribeCodeInsufficient)) {
				continue // never interrupted
			}
			interrupted++
			require.GreaterOrEqual(t, len(ev), 2, ch)
			last := ev[len(ev)-1]
			assert.True(t, last.WasRecovering && last.Recovered, "%s: recovered (%+v)", ch, last)
		}
	}
	t.Logf("%d of %d subscriptions to moved channels were interrupted and recovered", interrupted, 2*len(moved))

	// History comes from the new master: the whole stream, same epoch.
	for _, ch := range moved {
		pubs, sp, err := a.broker.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: -1}})
		require.NoError(t, err)
		assert.Equal(t, centrifuge.StreamPosition{Offset: uint64(len(sent[ch])), Epoch: epochs[ch]}, sp, ch)
		data := make([]string, len(pubs))
		for i, p := range pubs {
			data[i] = string(p.Data)
			assert.Equal(t, uint64(i+1), p.Offset, ch)
		}
		assert.Equal(t, sent[ch], data, "%s: the full stream", ch)
		n, err := to.Do(ctx, "XLEN", keys[ch][0])
		require.NoError(t, err)
		assert.Equal(t, int64(len(sent[ch])), n, "%s: the stream is on the new master", ch)
	}
}
