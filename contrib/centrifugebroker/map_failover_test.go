package centrifugebroker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mapFailoverRig is a 3-master cluster with a replica each, a publishing
// node and a node with a client subscribed to a map channel, and the
// master holding that channel with its replica.
type mapFailoverRig struct {
	c               *redistest.Cluster
	pubMB, subMB    *MapBroker
	ch              string
	client          *mapClient
	victim, replica *redistest.Server
	ctx             context.Context
}

func newMapFailoverRig(t *testing.T, newEpochOnServerChange bool) *mapFailoverRig {
	c := redistest.StartCluster(t, 3, 1)
	cfg := Config{Cluster: &cluster.Config{Addrs: c.Seeds()}, CallTimeout: 5 * time.Second,
		NewEpochOnServerChange: newEpochOnServerChange}
	_, pubMB, _ := startMapClientNode(t, cfg)
	subNode, subMB, _ := startMapClientNode(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 4*waitTimeout)
	t.Cleanup(cancel)
	r := &mapFailoverRig{c: c, pubMB: pubMB, subMB: subMB, ctx: ctx,
		ch: bigMap + "failover-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	l := pubMB.b.engine.(*cluster.Broker).Layout()
	var err error
	r.victim, err = c.MasterOfSlot(ctx, l.Slot(l.Partition(pubMB.wire(r.ch))))
	require.NoError(t, err)
	replicas, err := c.ReplicasOf(ctx, r.victim)
	require.NoError(t, err)
	require.Len(t, replicas, 1)
	r.replica = replicas[0]
	publish(t, pubMB, r.ch, "seed", "s", centrifuge.MapPublishOptions{})
	r.client = newMapClient(t, subNode, r.ch)
	return r
}

// replicated reports whether the replica has everything the victim wrote.
func (r *mapFailoverRig) replicated() bool {
	m, err1 := r.victim.Info(r.ctx, "replication")
	s, err2 := r.replica.Info(r.ctx, "replication")
	return err1 == nil && err2 == nil && s["slave_repl_offset"] == m["master_repl_offset"]
}

// TestMapManualFailover sends CLUSTER FAILOVER to the replica of the
// master holding a map channel while a node keeps publishing to it and a
// client of another node is subscribed. A manual failover waits for the
// replica to catch up, so nothing is lost: the whole stream reads back
// from the promoted replica under the same epoch, every publication once,
// in order, at contiguous offsets; and, without a final publication, the
// client ends holding the map Redis holds, what it missed live covered by
// the broker telling it to resubscribe.
func TestMapManualFailover(t *testing.T) {
	r := newMapFailoverRig(t, false)
	before, _ := state(t, r.pubMB, r.ch)
	require.Len(t, before, 1)
	_, seedPos, _, _ := r.client.view()

	feed := startMapFeed(t, r.pubMB, r.ch)
	feed.waitRounds(t, 20)
	_, err := r.replica.Do(r.ctx, "CLUSTER", "FAILOVER")
	require.NoError(t, err)
	promoted, err := r.c.WaitFailover(r.ctx, r.victim)
	require.NoError(t, err)
	require.Equal(t, r.replica, promoted)
	feed.waitRounds(t, 50)
	require.NoError(t, feed.halt())

	updates := feed.updates(r.ch)
	checkStream(t, r.pubMB, r.ch, updates, seedPos.Offset+1, seedPos.Epoch)
	waitInStep(t, r.client, r.pubMB)
	rep := r.client.reportCopy()
	assert.Empty(t, rep.Gaps, "nothing missing from what came live")
	assert.Empty(t, rep.Failures)
	if rep.Resyncs > 0 {
		assert.Positive(t, r.subMB.b.resync.unsubscribed.Load(), "the client was told by the broker")
	}
	t.Logf("%d publications; client told to resubscribe %d times, recovered %d, started over %d; disconnected %v",
		len(updates), rep.Resyncs, rep.Recovered, rep.Unrecoverable, rep.Disconnects)
}

// TestMapFailoverLostWrite kills the master of a map channel (SIGKILL) after
// it accepted a write its replica never got (the replica frozen and cut
// off), as asynchronous replication allows. The client had received that
// write live. The promoted replica keeps the channel's meta, so the epoch
// goes on and the lost write's offset is free again: the broker must not
// let the client keep the lost write as if it were the map. It proves that
// the client is told to resubscribe, that its recovery from a position
// past the promoted replica's top is refused as unrecoverable (Centrifuge
// does not check that for map subscriptions; the MapBroker must), and that
// the client then starts over from the state: it ends holding the map
// Redis holds, without the lost write, and follows what comes next live.
func TestMapFailoverLostWrite(t *testing.T) {
	r := newMapFailoverRig(t, false)
	for i := range 5 {
		publish(t, r.pubMB, r.ch, "k"+strconv.Itoa(i), "v"+strconv.Itoa(i), centrifuge.MapPublishOptions{})
	}
	waitInStep(t, r.client, r.pubMB)
	waitFor(t, r.replicated, func() string { return "the replica to catch up" })
	kept, keptPos := state(t, r.pubMB, r.ch)

	require.NoError(t, r.replica.Pause())
	_, err := r.victim.Do(r.ctx, "CLIENT", "KILL", "TYPE", "replica")
	require.NoError(t, err)
	lost := publish(t, r.pubMB, r.ch, "lost", "gone", centrifuge.MapPublishOptions{})
	require.Equal(t, keptPos.Offset+1, lost.Position.Offset)
	waitFor(t, func() bool { got, _, _, _ := r.client.view(); return got["lost"] == "gone" },
		func() string { return "the client to receive the doomed write live" })
	require.NoError(t, r.victim.Kill())
	require.NoError(t, r.replica.Resume())
	promoted, err := r.c.WaitFailover(r.ctx, r.victim)
	require.NoError(t, err)
	require.Equal(t, r.replica, promoted)

	// The client resynced before anything reused the lost offset.
	waitFor(t, func() bool {
		_, _, live, rep := r.client.view()
		return live && rep.Unrecoverable > 0
	}, func() string {
		return fmt.Sprintf("the client to be refused its recovery and start over: %+v", r.client.reportCopy())
	})
	s, sp := state(t, r.pubMB, r.ch)
	assert.Equal(t, kept, s, "the promoted replica has the map without the lost write")
	assert.Equal(t, keptPos, sp, "same epoch, the top before the lost write")
	_, err = r.pubMB.ReadStream(bg, r.ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Since: &lost.Position, Limit: -1}})
	assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition, "ReadStream since the lost write")
	_, err = r.pubMB.ReadState(bg, r.ch, centrifuge.MapReadStateOptions{Limit: -1, Revision: &lost.Position})
	assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition, "ReadState at the lost write's revision")
	waitInStep(t, r.client, r.pubMB)

	// The lost write's offset goes to the next one, which comes live.
	next := publish(t, r.pubMB, r.ch, "next", "n", centrifuge.MapPublishOptions{})
	assert.Equal(t, lost.Position, next.Position, "the offset is given out again under the same epoch")
	waitInStep(t, r.client, r.pubMB)
	got, _, _, rep := r.client.view()
	assert.NotContains(t, got, "lost")
	assert.Equal(t, "n", got["next"])
	assert.Positive(t, rep.Resyncs)
	assert.Empty(t, rep.Gaps)
	assert.Empty(t, rep.Failures)
	t.Logf("client report: %+v", rep)
}

// TestMapForcedFailover sends CLUSTER FAILOVER FORCE or TAKEOVER to the
// replica of the master holding a map channel while a node keeps
// publishing to it and a client of another node is subscribed, with
// Config.NewEpochOnServerChange. Neither variant waits for the replica to
// catch up, so writes Publish acknowledged can be lost (on Redis 7.0.15
// FORCE lost 1-180 per run, TAKEOVER 1-62). The promoted replica is
// another server process, so the map starts over under a new epoch; the
// client, holding a position of the old one, is refused recovery and
// starts over from the state, and ends holding exactly what Redis holds,
// built from the new epoch's stream. In LateResubscribe the client
// resubscribes only after new writes took the lost writes' offsets: the
// case an unchanged epoch cannot tell from a recovery.
func TestMapForcedFailover(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		late       bool // the client resubscribes after the lost offsets were reused
	}{
		{"FORCE", "FORCE", false},
		{"TAKEOVER", "TAKEOVER", false},
		{"TAKEOVER/LateResubscribe", "TAKEOVER", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMapFailoverRig(t, true)
			feed := startMapFeed(t, r.pubMB, r.ch)
			feed.waitRounds(t, 20)
			before, err := r.pubMB.ReadStream(bg, r.ch, centrifuge.MapReadStreamOptions{})
			require.NoError(t, err)
			release := func() {}
			if tc.late {
				release = r.client.holdResubscribes()
			}
			_, err = r.replica.Do(r.ctx, "CLUSTER", "FAILOVER", tc.mode)
			require.NoError(t, err)
			promoted, err := r.c.WaitFailover(r.ctx, r.victim)
			require.NoError(t, err)
			require.Equal(t, r.replica, promoted)
			feed.waitRounds(t, 50)
			release()
			require.NoError(t, feed.halt())

			waitInStep(t, r.client, r.pubMB)
			after, err := r.pubMB.ReadStream(bg, r.ch, centrifuge.MapReadStreamOptions{})
			require.NoError(t, err)
			assert.NotEqual(t, before.Position.Epoch, after.Position.Epoch, "the promoted replica started a new epoch")
			rep := r.client.reportCopy()
			assert.Empty(t, rep.Failures)
			checkHeld(t, r.client, r.pubMB)
			assert.Positive(t, rep.Unrecoverable, "the client held a position of the old epoch: its recovery must have been refused")
			t.Logf("%s: %d publications acknowledged; client told to resubscribe %d times, recovered %d, started over %d; disconnected %v",
				tc.name, len(feed.updates(r.ch)), rep.Resyncs, rep.Recovered, rep.Unrecoverable, rep.Disconnects)
		})
	}
}
