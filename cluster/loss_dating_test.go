package cluster

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// restoredCovers reports whether a Restored event of partition p spans
// at.
func restoredCovers(events *eventLog, p int, at time.Time) bool {
	for _, ev := range events.All() {
		if ev.Kind != shardcast.EventRestored || at.Before(ev.Since) || at.After(ev.Until) {
			continue
		}
		for _, q := range ev.Partitions {
			if q == p {
				return true
			}
		}
	}
	return false
}

// TestFrozenMasterWithSubscribesDatesLoss: a master freezes, without a
// failover, while Subscribes wait on its wire, and a message is published
// to each of its partitions just after (acknowledged once it thaws). The
// link gives the wire up after HealthTimeout; whichever sees the loss
// first, the link or a waiting Subscribe, the loss dates from the wire's
// last proof of health, so every acknowledged message the broker missed
// is inside a reported window. (The Subscribe dated it from when it
// noticed, after those messages, in about 2 of 3 runs.)
func TestFrozenMasterWithSubscribesDatesLoss(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1, redistest.WithArgs("--cluster-node-timeout", "15000"))
	events := &eventLog{}
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(),
		Conn:    shardcast.ConnOptions{HealthInterval: 250 * time.Millisecond, HealthTimeout: 750 * time.Millisecond},
		Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add}})
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	l := sub.Layout()
	channels := channelsPerPartition(l, 1, "frozen-sub.")
	require.NoError(t, sub.Subscribe(testCtx(t, 30*time.Second), channels...))
	masters, err := c.Masters(testCtx(t, 10*time.Second))
	require.NoError(t, err)
	victim := masters[0]
	parts := sub.Masters()[victim.Addr()]
	mine := inPartitions(l, channels, parts)
	fresh := inPartitions(l, numbered("frozen-sub-new.", 2000), parts)
	mark := time.Now()
	publishAll(t, pub, channels, "1")
	rec.waitSilentSince(t, channels, mark, 20*time.Second)

	time.Sleep(300 * time.Millisecond) // a ping answered since
	require.NoError(t, victim.Pause())
	t.Cleanup(func() { _ = victim.Resume() })
	var wg sync.WaitGroup
	for _, ch := range fresh { // Subscribes waiting on the frozen wire
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = sub.Subscribe(ctx, ch)
		})
	}
	time.Sleep(50 * time.Millisecond)
	sentAt := time.Now()
	var acked sync.Map
	for _, ch := range mine {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if pub.Publish(ctx, ch, []byte("7")) == nil {
				acked.Store(ch, true)
			}
		})
	}
	time.Sleep(2 * time.Second)
	require.NoError(t, victim.Resume())
	wg.Wait()
	require.True(t, waitFor(20*time.Second, func() bool {
		got, _ := eventPartitions(events, shardcast.EventRestored)
		return len(got) >= len(parts)
	}), "every partition of the frozen master restored")

	missed := 0
	for _, ch := range mine {
		if _, ok := acked.Load(ch); !ok || slicesContains(rec.seqs(ch), 7) {
			continue
		}
		missed++
		assert.True(t, restoredCovers(events, l.Partition(ch), sentAt), "%s: acknowledged at %s, missed, outside every reported window",
			ch, sentAt.Format("15:04:05.000"))
	}
	for _, ev := range events.Of(shardcast.EventInterrupted) {
		if ev.Shard == victim.Addr() {
			assert.False(t, ev.Since.After(sentAt), "an interruption of the frozen master dated %s, after the loss began", ev.Since.Format("15:04:05.000"))
		}
	}
	t.Logf("%d of %d acknowledged messages missed, all inside reported windows", missed, len(mine))
}

func slicesContains(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestOutputBufferDropDatesLoss: Redis drops a subscriber whose output
// buffer passed its limit, discarding what it had queued for it. The
// loss is dated from the wire's last proof of health, so the discarded
// messages, published before the broker read the end of its stream, are
// inside the reported window. (It was dated from that read.)
func TestOutputBufferDropDatesLoss(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim, other := masters[0], masters[1]
	// The broker reaches the victim through a proxy it can stall.
	px := redistest.StartProxy(t, victim.Addr())
	port := px.Port()
	_, err = victim.Do(ctx, "CONFIG", "SET", "cluster-announce-port", strconv.Itoa(port))
	require.NoError(t, err)
	proxyAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	require.True(t, waitFor(20*time.Second, func() bool {
		v, err := other.Do(ctx, "CLUSTER", "NODES")
		s, _ := v.(string)
		return err == nil && strings.Contains(s, proxyAddr)
	}), "the cluster announces the proxy")

	events := &eventLog{}
	var got sync.Map // message number → true
	handle := func(m shardcast.Message) {
		n, _ := strconv.Atoi(strings.SplitN(string(m.Payload), ":", 2)[0])
		got.Store(n, true)
	}
	sub := newBroker(t, Config{Addrs: []string{other.Addr()}, Options: shardcast.Options{Handler: handle, OnEvent: events.Add, Raw: true}})
	parts := sub.Masters()[proxyAddr]
	require.NotEmpty(t, parts, "the broker reaches the victim through the proxy: %v", sub.Masters())
	l := sub.Layout()
	ch := inPartitions(l, numbered("outbuf.", 500), parts)[0]
	require.NoError(t, sub.Subscribe(ctx, ch))
	conn, err := victim.Dial(ctx)
	require.NoError(t, err)
	defer conn.Close()
	// Messages stay under 16 KiB: Valkey 9 queues a longer bulk string
	// (min-string-size-avoid-copy-reply) as a reference to the published
	// value and charges only the reference to the output buffer, which
	// then never reaches its limit.
	pad := strings.Repeat("x", 8<<10)
	send := func(n int) (at time.Time, receivers int64) {
		at = time.Now()
		v, err := conn.Do(ctx, "SPUBLISH", sub.WireChannel(ch), strconv.Itoa(n)+":"+pad)
		require.NoError(t, err)
		receivers, _ = v.(int64)
		return at, receivers
	}
	send(1)
	require.True(t, waitFor(5*time.Second, func() bool { _, ok := got.Load(1); return ok }))
	_, err = conn.Do(ctx, "CONFIG", "SET", "client-output-buffer-limit", "pubsub 1mb 0 0")
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond) // a ping answered since

	// Publish until the victim has dropped the subscriber: the output
	// buffer grows only once the socket buffers up to the stalled proxy
	// are full, a few MB on loopback.
	px.Stall(true)
	sent := map[int]time.Time{}
	for n := 2; ; n++ {
		at, receivers := send(n)
		sent[n] = at
		if receivers == 0 {
			break
		}
		require.Less(t, n, 4000, "the victim never dropped the stalled subscriber: %d MB published without reaching its output buffer limit", n*len(pad)>>20)
	}
	px.Stall(false)
	require.True(t, waitFor(20*time.Second, func() bool { return len(events.Of(shardcast.EventRestored)) > 0 }), "restored")

	firstLost := 0
	for n := 2; n < 2+len(sent) && firstLost == 0; n++ {
		if _, ok := got.Load(n); !ok {
			firstLost = n
		}
	}
	require.NotZero(t, firstLost, "the output buffer limit dropped nothing")
	assert.True(t, restoredCovers(events, l.Partition(ch), sent[firstLost]), "message %d, published at %s and lost, is outside every reported window: %v",
		firstLost, sent[firstLost].Format("15:04:05.000"), events.All())
}
