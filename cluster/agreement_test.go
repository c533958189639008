package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var defaultAgreement shardcast.Agreement

// recordIn returns the layout record's fields and the registry's members,
// read straight from the master that holds them, and that master.
func recordIn(t *testing.T, c *redistest.Cluster) (map[string]string, []string, *redistest.Server) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	owner, err := c.MasterOfSlot(ctx, crc16.Slot(defaultAgreement.RecordKey()))
	require.NoError(t, err)
	raw, err := owner.Do(ctx, "HGETALL", defaultAgreement.RecordKey())
	require.NoError(t, err)
	fields := map[string]string{}
	list, _ := raw.([]any)
	for i := 0; i+1 < len(list); i += 2 {
		fields[list[i].(string)] = list[i+1].(string)
	}
	raw, err = owner.Do(ctx, "ZRANGE", layoutkey.Registry(defaultAgreement), "0", "-1")
	require.NoError(t, err)
	var members []string
	for _, m := range raw.([]any) {
		members = append(members, m.(string))
	}
	return fields, members, owner
}

// layoutOf returns the layout of partitions and prefix.
func layoutOf(t *testing.T, partitions int, prefix string) *shardcast.Layout {
	t.Helper()
	l, err := shardcast.NewLayout(partitions, prefix)
	require.NoError(t, err)
	return l
}

// requireRefused checks that err is the layout record's refusal of a
// broker with layout ours while brokers with recorded run, naming both.
func requireRefused(t *testing.T, err error, ours, recorded *shardcast.Layout, live int) {
	t.Helper()
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	var mm *shardcast.LayoutMismatchError
	require.True(t, errors.As(err, &mm))
	for _, l := range []*shardcast.Layout{ours, recorded} {
		assert.Contains(t, err.Error(), l.Fingerprint())
		assert.Contains(t, err.Error(), fmt.Sprintf("cluster: %d partitions, prefix %q", l.Partitions(), l.Prefix()))
	}
	assert.Equal(t, recorded.Partitions(), mm.Recorded.Partitions)
	assert.Equal(t, recorded.Prefix(), mm.Recorded.Prefix)
	assert.Equal(t, live, mm.Live)
}

// TestLayoutAgreement runs the layout record's cases on one cluster with
// replicas, one after the other.
func TestLayoutAgreement(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	t.Run("AgreeAndRefuse", func(t *testing.T) { testAgreeAndRefuse(t, c) })
	t.Run("Follow", func(t *testing.T) { testAgreementFollow(t, c) })
	t.Run("AfterCrash", func(t *testing.T) { testAgreementAfterCrash(t, c) })
	t.Run("HeartbeatFollowsFailover", func(t *testing.T) { testHeartbeatFollowsFailover(t, c) })
	// Last: it freezes a master.
	t.Run("RecordUnreachable", func(t *testing.T) { testRecordUnreachable(t, c) })
}

// testAgreeAndRefuse: brokers with the same partitions and prefix start
// side by side and exchange messages; one with another partition count or
// prefix is refused and changes nothing; once the old brokers closed, a
// new layout starts and replaces the record.
func testAgreeAndRefuse(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: c.Seeds()}) // a publish-only broker takes part too
	l128 := sub.Layout()
	fields, members, owner := recordIn(t, c)
	t.Logf("the record lives on %s", owner.Addr())
	assert.Equal(t, l128.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, "cluster", fields["engine"])
	assert.Equal(t, "128", fields["partitions"])
	assert.Equal(t, "", fields["prefix"])
	assert.ElementsMatch(t, []string{sub.member.ID(), pub.member.ID()}, members)

	for _, other := range []*shardcast.Layout{layoutOf(t, 1024, ""), layoutOf(t, 128, "x:"), layoutOf(t, 16, "x:")} {
		b, err := New(Config{Addrs: c.Seeds(), Partitions: other.Partitions(), Prefix: other.Prefix(),
			Options: shardcast.Options{Handler: rec.handle}})
		require.Nil(t, b)
		requireRefused(t, err, other, l128, 2)
	}
	fields, members, _ = recordIn(t, c)
	assert.Equal(t, l128.Fingerprint(), fields["fingerprint"], "refused brokers change nothing")
	assert.Len(t, members, 2)

	require.NoError(t, sub.Subscribe(ctx, "still"))
	require.NoError(t, pub.Publish(ctx, "still", []byte("1")))
	require.True(t, waitFor(20*time.Second, func() bool { return rec.count("still") == 1 }), "delivery between the agreeing brokers")

	l1024 := layoutOf(t, 1024, "")
	require.NoError(t, sub.Close())
	_, err := New(Config{Addrs: c.Seeds(), Partitions: 1024})
	requireRefused(t, err, l1024, l128, 1)
	require.NoError(t, pub.Close())
	_, members, _ = recordIn(t, c)
	assert.Empty(t, members, "Close leaves the registry")

	next := newBroker(t, Config{Addrs: c.Seeds(), Partitions: 1024})
	fields, members, _ = recordIn(t, c)
	assert.Equal(t, l1024.Fingerprint(), fields["fingerprint"], "the new layout replaced the record")
	assert.Equal(t, "1024", fields["partitions"])
	assert.Equal(t, []string{next.member.ID()}, members)
	_, err = New(Config{Addrs: c.Seeds()})
	requireRefused(t, err, l128, l1024, 1)
	require.NoError(t, next.Close())
	_, members, _ = recordIn(t, c)
	assert.Empty(t, members)
}

// TestCrashedBrokerProcess is not a test of its own: it is the broker
// testAgreementAfterCrash starts in a child process and kills.
func TestCrashedBrokerProcess(t *testing.T) {
	arg, ok := brokertest.InProcess()
	if !ok {
		t.Skip("the child process of TestLayoutAgreement/AfterCrash")
	}
	b, err := New(Config{Addrs: strings.Split(arg, ","), Agreement: shardcast.Agreement{Heartbeat: 100 * time.Millisecond}})
	require.NoError(t, err)
	brokertest.Ready(b.member.ID())
}

// testAgreementAfterCrash: a broker that dies without Close holds the
// record until its registration expires; then a broker with another
// layout starts and replaces the record.
func testAgreementAfterCrash(t *testing.T, c *redistest.Cluster) {
	child := brokertest.StartProcess(t, "TestCrashedBrokerProcess", strings.Join(c.Seeds(), ","))
	_, members, _ := recordIn(t, c)
	require.Equal(t, []string{child.ID}, members)
	l128, l256 := layoutOf(t, 128, ""), layoutOf(t, 256, "")
	_, err := New(Config{Addrs: c.Seeds(), Partitions: 256})
	requireRefused(t, err, l256, l128, 1)

	child.Kill()
	_, members, _ = recordIn(t, c)
	assert.Equal(t, []string{child.ID}, members, "a killed broker does not leave")
	var next *Broker
	require.True(t, waitFor(20*time.Second, func() bool {
		b, err := New(Config{Addrs: c.Seeds(), Partitions: 256})
		if err != nil {
			requireRefused(t, err, l256, l128, 1)
			return false
		}
		next = b
		return true
	}), "the dead broker's registration never expired")
	defer func() { require.NoError(t, next.Close()) }()
	fields, members, _ := recordIn(t, c)
	assert.Equal(t, l256.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, []string{next.member.ID()}, members, "the expired registration was pruned")
}

// testRecordUnreachable: with the master that holds the record frozen,
// New fails within Conn.CommandTimeout with an error naming the record,
// not a mismatch, and leaves no goroutine behind (TestMain checks).
func testRecordUnreachable(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	_, _, owner := recordIn(t, c)
	// Keep the frozen master's replica from taking over, so that New
	// meets the frozen master whatever the timing.
	replicas, err := c.ReplicasOf(ctx, owner)
	require.NoError(t, err)
	for _, r := range replicas {
		_, err := r.Do(ctx, "CONFIG", "SET", "cluster-replica-no-failover", "yes")
		require.NoError(t, err)
	}
	require.NoError(t, owner.Pause())
	_, err = New(Config{Addrs: c.Seeds(), Conn: shardcast.ConnOptions{CommandTimeout: 300 * time.Millisecond}})
	require.NoError(t, owner.Resume())
	require.Error(t, err)
	assert.NotErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "layout record "+defaultAgreement.RecordKey())
}

// testHeartbeatFollowsFailover: when the master that holds the record
// dies, the heartbeat finds the promoted replica (through a seed's MOVED)
// and renews there.
func testHeartbeatFollowsFailover(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	b := newBroker(t, Config{Addrs: c.Seeds(), Agreement: shardcast.Agreement{Heartbeat: 50 * time.Millisecond}})
	_, _, owner := recordIn(t, c)
	require.NoError(t, owner.Kill())
	promoted, err := c.WaitFailover(ctx, owner)
	require.NoError(t, err)
	score := func() float64 {
		v, err := promoted.Do(ctx, "ZSCORE", layoutkey.Registry(defaultAgreement), b.member.ID())
		require.NoError(t, err)
		s, _ := v.(string)
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	first := score()
	require.True(t, waitFor(20*time.Second, func() bool { return score() > first }),
		"the registration was never renewed on the promoted master %s", promoted.Addr())
	fields, members, now := recordIn(t, c)
	assert.Equal(t, promoted.Addr(), now.Addr())
	assert.Equal(t, b.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, []string{b.member.ID()}, members)
}

// testAgreementFollow: with Agreement.Follow, the first broker writes its
// own layout; one configured with another partition count and prefix
// adopts the recorded ones instead of failing, changes no record, and
// exchanges messages with the first on every channel; a record of the
// sharded engine cannot be followed and fails New naming why.
func testAgreementFollow(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	follow := shardcast.Agreement{App: "follow:", Follow: true}
	firstRec, followerRec := newRecorder(), newRecorder()
	first := newBroker(t, Config{Addrs: c.Seeds(), Partitions: 1024, Prefix: "f:", Agreement: follow,
		Options: shardcast.Options{Handler: firstRec.handle}})
	follower := newBroker(t, Config{Addrs: c.Seeds(), Agreement: follow,
		Options: shardcast.Options{Handler: followerRec.handle}})
	l := layoutOf(t, 1024, "f:")
	assert.Equal(t, l.Fingerprint(), first.Fingerprint(), "the first broker keeps its own layout")
	assert.Equal(t, l.Fingerprint(), follower.Fingerprint())
	assert.Equal(t, 1024, follower.Layout().Partitions())
	assert.Equal(t, "f:", follower.Layout().Prefix())
	assert.Len(t, follower.PartitionStats(), 1024)
	owner, err := c.MasterOfSlot(ctx, crc16.Slot(follow.RecordKey()))
	require.NoError(t, err)
	fp, err := owner.Do(ctx, "HGET", follow.RecordKey(), "fingerprint")
	require.NoError(t, err)
	assert.Equal(t, l.Fingerprint(), fp, "following changes no record")
	n, err := owner.Do(ctx, "ZCARD", layoutkey.Registry(follow))
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "both brokers registered")

	_, err = New(Config{Addrs: c.Seeds(), Agreement: shardcast.Agreement{App: follow.App}})
	requireRefused(t, err, layoutOf(t, 128, ""), l, 2)

	channels := numbered("follow.", 20)
	for _, ch := range channels {
		require.NoError(t, first.Subscribe(ctx, ch))
		require.NoError(t, follower.Subscribe(ctx, ch))
	}
	for _, ch := range channels {
		require.NoError(t, first.Publish(ctx, ch, []byte("from the first")))
		require.NoError(t, follower.Publish(ctx, ch, []byte("from the follower")))
	}
	require.True(t, waitFor(20*time.Second, func() bool {
		for _, ch := range channels {
			if firstRec.count(ch) < 2 || followerRec.count(ch) < 2 {
				return false
			}
		}
		return true
	}), "both publishers' messages at both brokers")

	foreign := shardcast.Agreement{App: "foreign:", Follow: true}
	owner, err = c.MasterOfSlot(ctx, crc16.Slot(foreign.RecordKey()))
	require.NoError(t, err)
	_, err = owner.Do(ctx, "HSET", foreign.RecordKey(), "version", "1", "fingerprint", "c0ffee",
		"engine", "sharded", "instances", "10.0.0.1:6379", "description", "sharded: 1 instances: 10.0.0.1:6379")
	require.NoError(t, err)
	_, err = owner.Do(ctx, "ZADD", layoutkey.Registry(foreign), strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "a-sharded-broker")
	require.NoError(t, err)
	_, err = New(Config{Addrs: c.Seeds(), Agreement: foreign})
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.Contains(t, err.Error(), "cannot adopt the recorded layout c0ffee")
	assert.Contains(t, err.Error(), "the sharded engine's")
}
