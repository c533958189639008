package cluster

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failoverRig is a 3×1 cluster with a subscriber on every partition, a
// publisher feeding every channel continuously, and the events the
// subscriber reported. The subscriber runs on default intervals.
type failoverRig struct {
	c        *redistest.Cluster
	sub, pub *Broker
	rec      *recorder
	events   *eventLog
	channels []string
	feed     *feeder
}

func newFailoverRig(t *testing.T) *failoverRig {
	r := &failoverRig{c: redistest.StartCluster(t, 3, 1), rec: newRecorder(), events: &eventLog{}}
	r.sub = newBroker(t, Config{Addrs: r.c.Seeds(),
		Options: shardcast.Options{Handler: r.rec.handle, OnEvent: r.events.Add}})
	r.pub = newBroker(t, Config{Addrs: r.c.Seeds()})
	r.channels = channelsPerPartition(r.sub.Layout(), 2, "fo.")
	require.NoError(t, r.sub.Subscribe(testCtx(t, 30*time.Second), r.channels...))
	r.feed = startFeeder(t, r.pub, r.channels)
	r.rec.waitSilentSince(t, r.channels, time.Now(), 30*time.Second)
	return r
}

// victim returns the first master and the partitions the broker has on it.
func (r *failoverRig) victim(t *testing.T) (*redistest.Server, []int) {
	masters, err := r.c.Masters(testCtx(t, 10*time.Second))
	require.NoError(t, err)
	v := masters[0]
	parts := r.sub.Masters()[v.Addr()]
	require.NotEmpty(t, parts)
	sort.Ints(parts)
	return v, parts
}

// lastFirstDelivery returns, over parts, the latest of each partition's
// first delivery of a message published at or after since.
func (r *failoverRig) lastFirstDelivery(parts []int, since time.Time) (time.Time, int) {
	var last time.Time
	lastPart := -1
	l := r.sub.Layout()
	for _, p := range parts {
		var first time.Time
		for _, ch := range inPartitions(l, r.channels, []int{p}) {
			if at := r.rec.firstSince(ch, since); !at.IsZero() && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if first.After(last) {
			last, lastPart = first, p
		}
	}
	return last, lastPart
}

// checkEvents asserts that Interrupted and Restored events named exactly
// parts, Interrupted on from and Restored on to.
func (r *failoverRig) checkEvents(t *testing.T, parts []int, from, to string, origin time.Time) {
	t.Helper()
	require.True(t, waitFor(30*time.Second, func() bool {
		got, _ := eventPartitions(r.events, shardcast.EventRestored)
		return len(got) >= len(parts)
	}), "restored partitions never covered %v: %v", parts, r.events.All())
	interrupted, ishards := eventPartitions(r.events, shardcast.EventInterrupted)
	restored, rshards := eventPartitions(r.events, shardcast.EventRestored)
	assert.Equal(t, setOf(parts), interrupted, "interrupted partitions")
	assert.Equal(t, setOf(parts), restored, "restored partitions")
	assert.Equal(t, map[string]bool{from: true}, ishards, "interrupted shard")
	assert.Equal(t, map[string]bool{to: true}, rshards, "restored shard")
	// Summarise: events of one kind, the earliest start and latest end
	// relative to the fault.
	type summary struct {
		events, parts int
		first, last   time.Duration
		causes        map[string]bool
	}
	sums := map[shardcast.EventKind]*summary{}
	for _, ev := range r.events.All() {
		if ev.Kind != shardcast.EventInterrupted && ev.Kind != shardcast.EventRestored {
			continue
		}
		if ev.Kind == shardcast.EventInterrupted {
			assert.Error(t, ev.Err, "an interruption names its cause")
		} else {
			assert.False(t, ev.Since.IsZero() || ev.Until.Before(ev.Since), "restored window %v..%v", ev.Since, ev.Until)
		}
		s := sums[ev.Kind]
		if s == nil {
			s = &summary{first: time.Hour, causes: map[string]bool{}}
			sums[ev.Kind] = s
		}
		at := ev.Since.Sub(origin)
		if ev.Kind == shardcast.EventRestored {
			at = ev.Until.Sub(origin)
		}
		s.events++
		s.parts += len(ev.Partitions)
		s.first, s.last = min(s.first, at), max(s.last, at)
		if ev.Err != nil {
			s.causes[ev.Err.Error()] = true
		}
	}
	for kind, s := range sums {
		t.Logf("FIGURE %v: %d events, %d partitions, %v..%v after the fault, causes %v",
			kind, s.events, s.parts, s.first.Round(time.Millisecond), s.last.Round(time.Millisecond), keys(s.causes))
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestFailover kills a master under continuous publishing: its replica is
// promoted, the broker follows, every channel delivers again, and the
// events name exactly the killed master's partitions. A Subscribe issued
// right after the kill, for new channels on the killed master, either
// waits and succeeds (and then delivers) or fails naming its cause. While
// the replica is held frozen after the kill, a Subscribe of a channel the
// broker holds on the lost partition must wait, not succeed.
func TestFailover(t *testing.T) {
	r := newFailoverRig(t)
	victim, parts := r.victim(t)
	l := r.sub.Layout()

	late := inPartitions(l, numbered("late.", 400), parts)
	require.NotEmpty(t, late)
	type result struct {
		err error
		at  time.Time
	}
	patient, hasty := make(chan result, 1), make(chan result, 1)

	// The victim's replica is frozen from the kill until the check of a
	// held channel below, so that no promotion can overlap that check.
	replicas, err := r.c.ReplicasOf(testCtx(t, 10*time.Second), victim)
	require.NoError(t, err)
	require.Len(t, replicas, 1)
	replica := replicas[0]

	killedAt := time.Now()
	require.NoError(t, victim.Kill())
	require.NoError(t, replica.Pause())
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = replica.Resume()
		}
	})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := r.sub.Subscribe(ctx, late[:len(late)/2]...)
		patient <- result{err, time.Now()}
	}()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := r.sub.Subscribe(ctx, late[len(late)/2:]...)
		hasty <- result{err, time.Now()}
	}()

	// Once the loss is reported, a Subscribe of a channel the broker
	// already holds must wait for the partition to come back, not report
	// success: Redis holds no subscription for it now.
	require.True(t, waitFor(10*time.Second, func() bool {
		_, shards := eventPartitions(r.events, shardcast.EventInterrupted)
		return shards[victim.Addr()]
	}), "no Interrupted event for %s", victim.Addr())
	held := inPartitions(l, r.channels, parts)[0]
	asked := time.Now()
	shortCtx, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	heldErr := r.sub.Subscribe(shortCtx, held)
	cancelShort()
	assert.ErrorIs(t, heldErr, context.DeadlineExceeded, "Subscribe of a held channel of an interrupted partition")
	t.Logf("held-channel Subscribe asked %v after the kill: %v", asked.Sub(killedAt).Round(time.Millisecond), heldErr)
	require.NoError(t, replica.Resume())
	resumed = true

	promoted, err := r.c.WaitFailover(testCtx(t, 30*time.Second), victim)
	require.NoError(t, err)
	t.Logf("replica %s promoted %v after the kill of %s", promoted.Addr(), time.Since(killedAt).Round(time.Millisecond), victim.Addr())

	r.rec.waitSilentSince(t, r.channels, killedAt, 30*time.Second)
	last, lastPart := r.lastFirstDelivery(parts, killedAt)
	t.Logf("FIGURE failover: kill -> first delivery on the last of %d affected partitions (partition %d): %v",
		len(parts), lastPart, last.Sub(killedAt).Round(time.Millisecond))
	r.checkEvents(t, parts, victim.Addr(), promoted.Addr(), killedAt)
	assert.Equal(t, parts, sortedCopy(r.sub.Masters()[promoted.Addr()]), "the promoted replica carries the partitions")
	assert.NotContains(t, r.sub.Masters(), victim.Addr())

	// The Subscribe calls made during the failover.
	p := <-patient
	require.NoError(t, p.err, "a Subscribe with a 30 s budget must outlast a failover")
	t.Logf("Subscribe issued at the kill succeeded after %v", p.at.Sub(killedAt).Round(time.Millisecond))
	h := <-hasty
	if h.err != nil {
		assert.ErrorIs(t, h.err, context.DeadlineExceeded)
		assert.Contains(t, h.err.Error(), "partition", "the error names the partition")
		t.Logf("Subscribe with a 300 ms budget failed: %v", h.err)
	}
	checkLateChannels(t, r, late, h.err == nil)
	settle(t, r.rec, r.feed, r.channels)
	rep := checkDelivery(t, r.rec, r.feed, r.channels)
	lost := checkLossReported(t, r.rec, r.feed, r.events, l, r.channels)
	t.Logf("FIGURE failover: duplicates %d, reordered %d, failed publishes %d, acknowledged but lost %d (all inside reported windows)",
		rep.duplicates, rep.reordered, r.feed.failures(), lost)
}

// checkLateChannels publishes to channels subscribed during the failover:
// the first half must deliver; the second half must deliver if its
// Subscribe succeeded, and must not if it failed.
func checkLateChannels(t *testing.T, r *failoverRig, late []string, secondOK bool) {
	t.Helper()
	mark := time.Now()
	publishAll(t, r.pub, late, "1")
	want := late[:len(late)/2]
	if secondOK {
		want = late
	}
	r.rec.waitSilentSince(t, want, mark, 20*time.Second)
	if !secondOK {
		// The subscribed half proves the publishes arrived; a failed
		// Subscribe left nothing behind.
		for _, ch := range late[len(late)/2:] {
			assert.Zero(t, r.rec.count(ch), "channel %s delivers although its Subscribe failed", ch)
		}
		assert.Equal(t, len(r.channels)+len(late)/2, r.sub.Stats().Channels)
	}
}

func sortedCopy(s []int) []int {
	out := append([]int(nil), s...)
	sort.Ints(out)
	return out
}

// TestFrozenMaster freezes a master with SIGSTOP for longer than the node
// timeout, so that its replica takes over while its sockets stay open and
// silent, then wakes it up. Delivery must resume on every channel, and the
// events must say what noticed the frozen master.
func TestFrozenMaster(t *testing.T) {
	r := newFailoverRig(t)
	victim, parts := r.victim(t)

	pausedAt := time.Now()
	require.NoError(t, victim.Pause())
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = victim.Resume()
		}
	})
	promoted, err := r.c.WaitFailover(testCtx(t, 30*time.Second), victim)
	require.NoError(t, err)
	t.Logf("replica %s promoted %v after SIGSTOP of %s", promoted.Addr(), time.Since(pausedAt).Round(time.Millisecond), victim.Addr())

	r.rec.waitSilentSince(t, r.channels, pausedAt, 30*time.Second)
	last, lastPart := r.lastFirstDelivery(parts, pausedAt)
	t.Logf("FIGURE sigstop: pause -> first delivery on the last of %d affected partitions (partition %d): %v",
		len(parts), lastPart, last.Sub(pausedAt).Round(time.Millisecond))
	r.checkEvents(t, parts, victim.Addr(), promoted.Addr(), pausedAt)

	// Wake the old master: it rejoins as a replica of its successor and
	// pushes sunsubscribe to whoever is still subscribed on it. Delivery
	// must go on everywhere.
	resumed = true
	require.NoError(t, victim.Resume())
	require.NoError(t, r.c.WaitConverged(testCtx(t, 30*time.Second)))
	mark := time.Now()
	r.rec.waitSilentSince(t, r.channels, mark, 30*time.Second)
	assert.NotContains(t, r.sub.Masters(), victim.Addr())
	settle(t, r.rec, r.feed, r.channels)
	rep := checkDelivery(t, r.rec, r.feed, r.channels)
	t.Logf("FIGURE sigstop: duplicates %d, reordered %d, failed publishes %d of which delivered late %d, acknowledged but lost %d",
		rep.duplicates, rep.reordered, r.feed.failures(), rep.lateFailed, rep.missing)
	checkLossReported(t, r.rec, r.feed, r.events, r.sub.Layout(), r.channels)
}

// settle halts the feeder and waits until every channel received the last
// message the feeder published on it successfully.
func settle(t *testing.T, rec *recorder, f *feeder, channels []string) {
	t.Helper()
	f.halt()
	var behind []string
	ok := waitFor(20*time.Second, func() bool {
		behind = behind[:0]
		for _, ch := range channels {
			seqs := rec.seqs(ch)
			if last := f.lastSeq(ch); last > 0 && !slices.Contains(seqs, last) {
				behind = append(behind, ch)
			}
		}
		return len(behind) == 0
	})
	require.True(t, ok, "%d channels never received their last message, e.g. %v", len(behind), head(behind, 5))
}

// TestManualFailover sends CLUSTER FAILOVER to a replica under continuous
// publishing. The demoted master learns of its demotion only after the
// broker may already be subscribed on the new one, and meanwhile it still
// delivers its shard's messages: the broker must take each message once
// (the old wire's copies are counted in Stats.Stale), keep per-channel
// order, and report every loss inside an Interrupted/Restored window.
func TestManualFailover(t *testing.T) {
	r := newFailoverRig(t)
	victim, parts := r.victim(t)
	replicas, err := r.c.ReplicasOf(testCtx(t, 10*time.Second), victim)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	promoted := replicas[0]

	at := time.Now()
	_, err = promoted.Do(testCtx(t, 10*time.Second), "CLUSTER", "FAILOVER")
	require.NoError(t, err)
	require.True(t, waitFor(30*time.Second, func() bool {
		return slices.Equal(parts, sortedCopy(r.sub.Masters()[promoted.Addr()]))
	}), "the broker never moved partitions %v to %s", parts, promoted.Addr())
	r.rec.waitSilentSince(t, r.channels, time.Now(), 30*time.Second)
	settle(t, r.rec, r.feed, r.channels)
	rep := checkDelivery(t, r.rec, r.feed, r.channels)
	lost := checkLossReported(t, r.rec, r.feed, r.events, r.sub.Layout(), r.channels)
	t.Logf("FIGURE manual failover: moved %d partitions in %v; duplicates %d, reordered %d, stale copies dropped %d, acknowledged but lost %d (all inside reported windows)",
		len(parts), time.Since(at).Round(time.Millisecond), rep.duplicates, rep.reordered, r.sub.Stats().Stale, lost)
}
