package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// atomicCluster starts a 3×1 cluster on a server with atomic slot
// migration (CLUSTER MIGRATESLOTS, Valkey 9.0 and later) and skips the
// test on any other; a Valkey 9 without the command fails it.
func atomicCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	b, err := redistest.Build()
	require.NoError(t, err)
	if !b.IsValkey() || !b.AtLeast(9, 0) {
		t.Skipf("%s has no atomic slot migration (CLUSTER MIGRATESLOTS is Valkey 9.0+)", b)
	}
	c := redistest.StartCluster(t, 3, 1)
	ok, err := c.Nodes()[0].HasAtomicMigration(testCtx(t, 10*time.Second))
	require.NoError(t, err)
	require.True(t, ok, "%s lists no CLUSTER MIGRATESLOTS", b)
	return c
}

// TestAtomicSlotMigration runs the atomic-migration cases on one cluster:
// a slot moved by the server itself (CLUSTER MIGRATESLOTS) is a new way for
// a partition's subscriptions to change owner.
func TestAtomicSlotMigration(t *testing.T) {
	c := atomicCluster(t)
	t.Run("Pushes", func(t *testing.T) { testAtomicMigrationPushes(t, c) })
	t.Run("Followed", func(t *testing.T) { testAtomicMigrationFollowed(t, c) })
	t.Run("Cancelled", func(t *testing.T) { testAtomicMigrationCancelled(t, c) })
	t.Run("LibraryKeys", func(t *testing.T) { testAtomicMigrationLibraryKeys(t, c) })
}

// testAtomicMigrationPushes pins what the servers do, without a broker: a
// sharded subscriber of the slot on the source gets no push while the job
// runs and one sunsubscribe when ownership flips; from the push on, the
// source answers SPUBLISH with MOVED to the target, which holds no
// subscriber of the channel until a client subscribes there.
func testAtomicMigrationPushes(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	ch := "asm.push"
	slot := crc16.Slot(ch)
	from, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	to := diffOtherMaster(t, ctx, c, from)
	sub, err := from.Dial(ctx)
	require.NoError(t, err)
	defer sub.Close()
	v, err := sub.Do(ctx, "SSUBSCRIBE", ch)
	require.NoError(t, err)
	require.Equal(t, []any{"ssubscribe", ch, int64(1)}, v)

	// Keys that make the snapshot last a while.
	fillSlot(t, from, ch, 20000, 10)
	began := time.Now()
	m, err := c.StartAtomicMigration(ctx, slot, slot, to)
	require.NoError(t, err)
	// The job's states, as the source lists them, polled while the
	// subscriber waits for its push. asked is when each poll was sent.
	type seen struct {
		state      string
		asked, got time.Duration
	}
	states := []seen{{m.FirstState, 0, 0}}
	polled := make(chan struct{})
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer func() { stopPoll(); <-polled }()
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			asked := time.Since(began)
			s, _, err := m.State(pollCtx)
			if err == nil {
				states = append(states, seen{s, asked, time.Since(began)})
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	push, err := sub.Receive(ctx)
	pushedAt := time.Since(began)
	require.NoError(t, err)
	assert.Equal(t, []any{"sunsubscribe", ch, int64(0)}, push, "the source drops its subscribers of the slot")
	_, err = from.Do(ctx, "SPUBLISH", ch, "after")
	moved, ok := resp.IsServerError(err)
	require.True(t, ok, "SPUBLISH on the source after its push: %v", err)
	assert.Equal(t, fmt.Sprintf("MOVED %d %s", slot, to.Addr()), moved.Msg, "the source has given the slot up by its push")
	require.NoError(t, m.Wait(ctx))
	stopPoll()
	<-polled
	// The push comes with the flip, not before: every state asked for
	// after the push was read is past the snapshot, and one before the
	// flip was seen before it (the first, at the latest).
	var phases []string
	last, sawBefore := "", false
	for _, s := range states {
		if s.state != last {
			phases = append(phases, fmt.Sprintf("%s@%v", s.state, s.got.Round(time.Millisecond)))
			last = s.state
		}
		if s.asked > pushedAt {
			assert.Contains(t, []string{"failover-granted", "success"}, s.state, "state %q asked %v after the push", s.state, s.asked-pushedAt)
		} else if s.got < pushedAt && s.state != "failover-granted" && s.state != "success" {
			sawBefore = true
		}
	}
	assert.True(t, sawBefore, "no state before the flip seen before the push: %v", phases)
	n, err := to.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch)
	require.NoError(t, err)
	assert.Equal(t, []any{ch, int64(0)}, n, "the target has no subscriber of the moved channel")
	t.Logf("FIGURE atomic migration of slot %d %s -> %s: sunsubscribe pushed %v after MIGRATESLOTS; job states on the source: %v",
		slot, from.Addr(), to.Addr(), pushedAt.Round(time.Millisecond), phases)
}

// testAtomicMigrationFollowed migrates the slots of three partitions, one
// of them holding 50,000 keys, while every channel is published
// continuously: the broker follows, the moved
// channels deliver again from the target, nothing reaches it twice or out
// of order, the other partitions lose nothing, and every loss lies inside
// a window reported for its partition.
func testAtomicMigrationFollowed(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, 2*time.Minute)
	rec, events := newRecorder(), &eventLog{}
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add}})
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	l := sub.Layout()
	channels := channelsPerPartition(l, 2, "asm.")
	require.NoError(t, sub.Subscribe(ctx, channels...))
	feed := startFeeder(t, pub, channels)
	rec.waitSilentSince(t, channels, time.Now(), 30*time.Second)

	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	from := masters[0]
	to := diffOtherMaster(t, ctx, c, from)
	moved := sortedCopy(sub.Masters()[from.Addr()])[:3]
	movedChannels := inPartitions(l, channels, moved)
	// The first slot holds keys: after its flip the source deletes them
	// before it serves anyone, its subscribers included, so they hear of
	// the move only then, while the target already takes publishes.
	fillSlot(t, from, l.Tag(moved[0]), 50000, 10)
	began := time.Now()
	for _, p := range moved {
		require.NoError(t, c.MigrateSlotsAtomic(ctx, l.Slot(p), l.Slot(p), to))
	}
	movedAt := time.Now()
	t.Logf("migrated partitions %v from %s to %s in %v", moved, from.Addr(), to.Addr(), movedAt.Sub(began).Round(time.Millisecond))
	rec.waitSilentSince(t, movedChannels, movedAt, 30*time.Second)
	t.Logf("FIGURE atomic migration: every moved channel delivers again %v after the last migration finished", time.Since(movedAt).Round(time.Millisecond))
	stats := sub.PartitionStats()
	for _, p := range moved {
		assert.Equal(t, to.Addr(), stats[p].Master, "partition %d follows its slot", p)
		assert.Positive(t, stats[p].Received, "partition %d", p)
	}

	settle(t, rec, feed, channels)
	still := slices.DeleteFunc(slices.Clone(channels), func(ch string) bool { return slices.Contains(movedChannels, ch) })
	repMoved := checkDelivery(t, rec, feed, movedChannels)
	repStill := checkDelivery(t, rec, feed, still)
	t.Logf("FIGURE atomic migration: moved channels: duplicates %d, reordered %d, lost %d; other channels: duplicates %d, lost %d; failed publishes %d",
		repMoved.duplicates, repMoved.reordered, repMoved.missing, repStill.duplicates, repStill.missing, feed.failures())
	assert.Zero(t, repMoved.duplicates+repStill.duplicates, "duplicates")
	assert.Zero(t, repMoved.reordered+repStill.reordered, "reordered")
	assert.Zero(t, repStill.missing, "channels whose slot did not move lose nothing")
	checkLossReported(t, rec, feed, events, l, channels)
	interrupted, _ := eventPartitions(events, shardcast.EventInterrupted)
	restored, rshards := eventPartitions(events, shardcast.EventRestored)
	assert.Equal(t, setOf(moved), interrupted, "the moved partitions, and only they, were interrupted")
	assert.Equal(t, setOf(moved), restored)
	assert.Equal(t, map[string]bool{to.Addr(): true}, rshards, "restored on the target")
	// The engine's cue is the source's push, not its slot map poll.
	for _, p := range moved {
		assert.True(t, slices.ContainsFunc(events.Of(shardcast.EventInterrupted), func(ev shardcast.Event) bool {
			return ev.Shard == from.Addr() && slices.Contains(ev.Partitions, p) && errors.Is(ev.Err, shardcast.ErrSlotMoved)
		}), "partition %d: no interruption for the source's sunsubscribe: %v", p, events.All())
	}
}

// fillSlot writes n keys of size bytes into the slot of tag, so that a
// migration of it takes a while.
func fillSlot(t *testing.T, s *redistest.Server, tag string, n, size int) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	const batch = 20000
	for done := 0; done < n; done += batch {
		_, err := s.Do(ctx, "EVAL", `local v = string.rep('x', tonumber(ARGV[3]))
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call('SET', KEYS[1] .. i, v) end
return 1`, "1", "{"+tag+"}:fill:", strconv.Itoa(done), strconv.Itoa(min(done+batch, n)-1), strconv.Itoa(size))
		require.NoError(t, err)
	}
}

// testAtomicMigrationCancelled cancels a migration of a partition's slot
// midway (CLUSTER CANCELSLOTMIGRATIONS): ownership never flips, so the
// source pushes nothing, the broker reports no interruption of the
// partition, and its channels lose nothing.
func testAtomicMigrationCancelled(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, 2*time.Minute)
	rec, events := newRecorder(), &eventLog{}
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add}})
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	l := sub.Layout()
	part := l.Partition("asm.cancel")
	channels := inPartitions(l, channelsPerPartition(l, 4, "asm.cancel."), []int{part})
	slot := l.Slot(part)
	from, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	to := diffOtherMaster(t, ctx, c, from)
	// Keys that keep the job busy long enough to be cancelled.
	fillSlot(t, from, l.Tag(part), 200000, 256)
	require.NoError(t, sub.Subscribe(ctx, channels...))
	feed := startFeeder(t, pub, channels)
	rec.waitSilentSince(t, channels, time.Now(), 30*time.Second)

	m, err := c.StartAtomicMigration(ctx, slot, slot, to)
	require.NoError(t, err)
	// Midway: the source is streaming its snapshot to the target.
	var now string
	require.True(t, waitFor(30*time.Second, func() bool {
		now, _, err = m.State(ctx)
		return err != nil || now == "snapshotting" || now == "success"
	}), "the migration never reached its snapshot")
	require.NoError(t, err)
	state, err := m.Cancel(ctx)
	require.NoError(t, err)
	require.NotEqual(t, "success", state, "the migration of 200,000 keys finished before it could be cancelled")
	owner, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	assert.Same(t, from, owner, "a cancelled migration leaves the slot with its source")
	mark := time.Now()
	rec.waitSilentSince(t, channels, mark, 30*time.Second)
	settle(t, rec, feed, channels)
	rep := checkDelivery(t, rec, feed, channels)
	t.Logf("FIGURE atomic migration cancelled (state %q): duplicates %d, reordered %d, lost %d, failed publishes %d",
		state, rep.duplicates, rep.reordered, rep.missing, feed.failures())
	assert.Zero(t, rep.missing, "a cancelled migration loses nothing")
	interrupted, _ := eventPartitions(events, shardcast.EventInterrupted)
	assert.False(t, interrupted[part], "partition %d was reported interrupted by a migration that never flipped: %v", part, events.All())
	s := strconv.Itoa(int(slot))
	n, err := from.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", s)
	require.NoError(t, err)
	assert.Equal(t, int64(200000), n, "the keys stay on the source")
	assert.True(t, waitFor(20*time.Second, func() bool {
		n, err = to.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", s)
		return err == nil && n == int64(0)
	}), "the target keeps %v keys of the cancelled import (err %v)", n, err)
}

// testAtomicMigrationLibraryKeys migrates slots that hold the library's
// own keys: a channel's script state (kept in its partition's slot, as
// history is) and the layout record with the broker registry. Scripts
// follow the slot to the target and find their keys there; the record is
// read and written on its new master.
func testAtomicMigrationLibraryKeys(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true, Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true}})
	ch := "asm.keys"
	key := counterKey(pub, ch)
	require.NoError(t, sub.Subscribe(ctx, ch))
	for want := int64(1); want <= 2; want++ {
		v, err := pub.Eval(ctx, ch, countAndPublish, []string{key}, pub.WireChannel(ch))
		require.NoError(t, err)
		require.Equal(t, want, v)
	}
	slot := crc16.Slot(key)
	from, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	to := diffOtherMaster(t, ctx, c, from)
	require.NoError(t, c.MigrateSlotsAtomic(ctx, slot, slot, to))
	v, err := to.Do(ctx, "GET", key)
	require.NoError(t, err)
	assert.Equal(t, "2", v, "the counter moved with its slot")
	v, err = pub.Eval(ctx, ch, countAndPublish, []string{key}, pub.WireChannel(ch))
	require.NoError(t, err)
	assert.Equal(t, int64(3), v, "the script runs on the target, against the moved counter")
	require.True(t, waitFor(20*time.Second, func() bool { return slices.Contains(rec.seqs(ch), 3) }),
		"the script's publish after the move reaches the subscriber: %v", rec.seqs(ch))

	// The layout record and the registry, in one slot.
	_, members, owner := recordIn(t, c)
	require.Len(t, members, 2)
	recSlot := crc16.Slot(defaultAgreement.RecordKey())
	dest := diffOtherMaster(t, ctx, c, owner)
	require.NoError(t, c.MigrateSlotsAtomic(ctx, recSlot, recSlot, dest))
	fields, members, owner := recordIn(t, c)
	require.Same(t, dest, owner)
	assert.Equal(t, sub.Layout().Fingerprint(), fields["fingerprint"], "the record moved whole")
	assert.Len(t, members, 2)
	refused, err := New(Config{Addrs: c.Seeds(), Partitions: 1024})
	if refused != nil {
		require.NoError(t, refused.Close())
	}
	requireRefused(t, err, layoutOf(t, 1024, ""), sub.Layout(), 2)
	joined := newBroker(t, Config{Addrs: c.Seeds()})
	_, members, _ = recordIn(t, c)
	assert.Contains(t, members, joined.member.ID(), "a new broker registers on the record's new master")
	require.NoError(t, joined.Close())
}
