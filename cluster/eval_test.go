package cluster

import (
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countAndPublish increments a per-channel counter and publishes its new
// value to the channel, in one atomic step on the channel's master.
var countAndPublish = shardcast.NewScript(`
local n = redis.call('INCR', KEYS[1])
redis.call('SPUBLISH', ARGV[1], tostring(n))
return n`)

// counterKey is a channel's counter key, in the channel's slot.
func counterKey(b *Broker, channel string) string {
	l := b.Layout()
	return l.PartitionKey(l.Partition(channel), "count:"+channel)
}

// testEval: a script runs on the master of its channel's slot and its
// SPUBLISH reaches the channel's subscribers; a key outside that slot is
// refused before anything is sent.
func testEval(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true, Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true}})
	channels := channelsPerPartition(pub.Layout(), 1, "eval.")[:24]
	require.NoError(t, sub.Subscribe(ctx, channels...))
	for _, ch := range channels {
		v, err := pub.Eval(ctx, ch, countAndPublish, []string{counterKey(pub, ch)}, pub.WireChannel(ch))
		require.NoError(t, err)
		assert.Equal(t, int64(1), v)
		owner, err := c.MasterOfSlot(ctx, pub.Layout().Slot(pub.Layout().Partition(ch)))
		require.NoError(t, err)
		n, err := owner.Do(ctx, "EXISTS", counterKey(pub, ch))
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "the counter of %s lives on its master", ch)
	}
	require.True(t, waitFor(20*time.Second, func() bool {
		for _, ch := range channels {
			if rec.count(ch) != 1 {
				return false
			}
		}
		return true
	}), "not every script's SPUBLISH was delivered")

	_, err := pub.Eval(ctx, channels[0], countAndPublish, []string{"elsewhere"}, "x")
	assert.ErrorIs(t, err, ErrInvalidKey)
	_, err = pub.Eval(ctx, channels[0], countAndPublish, nil)
	assert.ErrorIs(t, err, ErrInvalidKey)
}

// TestEvalFollowsSlotMove: while a channel's slot migrates to another
// master and its key has gone ahead, the old master answers ASK and the
// broker resends the script to the new one after ASKING (without it the
// new master would send it back with MOVED). A script on two keys, one
// of them not migrated, meets TRYAGAIN there and is resent until the
// migration is over. Once the slot moved, a broker that still routes it
// to the old master gets MOVED and resends it to the new one. The scripts
// run on the new master, against the migrated keys, once each.
func TestEvalFollowsSlotMove(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t, time.Minute)
	// Resends after TRYAGAIN wait 0.2 s, then 0.4, 0.8 and 1.6 s: the
	// migration below has seconds to finish. The slot map is read at the
	// start only (TopologyInterval, and RecoveryInterval, which spaces the
	// polls a failed command asks for), so that the route is still stale
	// once the slot moved, whenever the scheduler runs what.
	pub := newBroker(t, Config{Addrs: c.Seeds(), TopologyInterval: time.Hour, Options: shardcast.Options{Raw: true},
		Conn: shardcast.ConnOptions{ReconnectMin: 200 * time.Millisecond, ReconnectMax: 2 * time.Second, RecoveryInterval: time.Hour}})
	l := pub.Layout()
	ch := "moving"
	key := counterKey(pub, ch)
	slot := l.Slot(l.Partition(ch))
	v, err := pub.Eval(ctx, ch, countAndPublish, []string{key}, pub.WireChannel(ch))
	require.NoError(t, err)
	require.Equal(t, int64(1), v)

	from, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	to := masters[0]
	if to.Addr() == from.Addr() {
		to = masters[1]
	}
	// A migration under way, as redis-cli runs one, with the key moved.
	s := strconv.Itoa(int(slot))
	_, err = to.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", from.ID())
	require.NoError(t, err)
	_, err = from.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", to.ID())
	require.NoError(t, err)
	_, err = from.Do(ctx, "MIGRATE", "127.0.0.1", strconv.Itoa(to.Port()), "", "0", "5000", "KEYS", key)
	require.NoError(t, err)
	before, err := to.CommandStats(ctx)
	require.NoError(t, err)
	v, err = pub.Eval(ctx, ch, countAndPublish, []string{key}, pub.WireChannel(ch))
	require.NoError(t, err, "the script follows ASK")
	assert.Equal(t, int64(2), v, "it ran against the migrated counter")
	after, err := to.CommandStats(ctx)
	require.NoError(t, err)
	// The new master did not know the script: EVALSHA met NOSCRIPT, and
	// EVAL followed, each after an ASKING.
	assert.Equal(t, before["asking"]+2, after["asking"], "ASKING went before each command")
	assert.Equal(t, before["eval"]+1, after["eval"], "the script ran on the new master")

	// A publish meanwhile is served by the source, not redirected: Redis
	// checks keys, not shard channels, against a migration.
	calls, _ := spublishStats(t, from)
	require.NoError(t, pub.Publish(ctx, ch, []byte("x")))
	nowCalls, _ := spublishStats(t, from)
	assert.Equal(t, calls+1, nowCalls, "the source ran the publish")
	assert.Equal(t, after["asking"], commandCalls(t, to, "asking"), "no ASKING for the publish")

	// A script on two keys, one moved and one not created yet: the source
	// redirects it with ASK (it holds neither), the new master refuses it
	// with TRYAGAIN (it holds one; the migration is half done), and the
	// broker resends it, with backoff, until the migration is over.
	other := l.PartitionKey(l.Partition(ch), "other:"+ch)
	_, rejected := cmdStats(t, to, "evalsha")
	both := make(chan error, 1)
	go func() {
		_, err := pub.Eval(ctx, ch, countBoth, []string{key, other})
		both <- err
	}()
	require.True(t, waitFor(10*time.Second, func() bool {
		_, now := cmdStats(t, to, "evalsha")
		return now > rejected
	}), "the new master never refused the two-key script")
	select {
	case err := <-both:
		t.Fatalf("the two-key script returned while the migration was half done: %v", err)
	default:
	}

	for _, m := range masters {
		_, err = m.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", to.ID())
		require.NoError(t, err)
	}
	require.NoError(t, <-both, "the two-key script waited out the migration")
	require.NoError(t, c.WaitConverged(ctx))
	require.Equal(t, from.Addr(), pub.masterOf(l.Partition(ch)), "the broker's route is still stale")
	v, err = pub.Eval(ctx, ch, countAndPublish, []string{key}, pub.WireChannel(ch))
	require.NoError(t, err, "the script follows MOVED")
	assert.Equal(t, int64(4), v, "the two-key script ran once")
	for k, want := range map[string]string{key: "4", other: "1"} {
		n, err := to.Do(ctx, "GET", k)
		require.NoError(t, err)
		assert.Equal(t, want, n, k)
	}
}

// countBoth increments two counters of one slot.
var countBoth = shardcast.NewScript(`
redis.call('INCR', KEYS[1])
return redis.call('INCR', KEYS[2])`)

// countAndFail increments a counter and replies the error ARGV[1]: a
// script whose own error looks like one of Redis Cluster's.
var countAndFail = shardcast.NewScript(`
redis.call('INCR', KEYS[1])
return redis.error_reply(ARGV[1])`)

// testEvalScriptErrorNotResent: a script's own error reply that begins
// like a redirection or a refusal for now (but names another slot, or is
// not the server's message) is returned to the caller, and the script ran
// once: resending it would run it again.
func testEvalScriptErrorNotResent(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	b := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true},
		Conn: shardcast.ConnOptions{ReconnectMin: time.Millisecond, ReconnectMax: 2 * time.Millisecond}})
	l := b.Layout()
	ch := "eval.own-error"
	slot := l.Slot(l.Partition(ch))
	other := (slot + 1) % 16384
	master, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	for i, msg := range []string{
		"MOVED " + strconv.Itoa(int(other)) + " " + master.Addr(),
		"ASK " + strconv.Itoa(int(other)) + " " + master.Addr(),
		"TRYAGAIN the script's own",
		"CLUSTERDOWN the script's own",
		"LOADING the script's own words",
	} {
		key := l.PartitionKey(l.Partition(ch), "own-error:"+strconv.Itoa(i))
		_, err := b.Eval(ctx, ch, countAndFail, []string{key}, msg)
		require.Error(t, err, msg)
		assert.Contains(t, err.Error(), msg, "the script's reply is the error")
		assert.NotErrorIs(t, err, shardcast.ErrNotSent, msg)
		n, err := master.Do(ctx, "GET", key)
		require.NoError(t, err)
		assert.Equal(t, "1", n, "%q: the script ran once", msg)
	}

	// A redirection that names the script's slot is followed (Redis's own
	// cannot be told from it); an error of the script's own on the node
	// it led to ends the call there.
	key := l.PartitionKey(l.Partition(ch), "own-error:resent")
	moved := "MOVED " + strconv.Itoa(int(slot)) + " " + master.Addr()
	for _, own := range []string{"TRYAGAIN the script's own", "CLUSTERDOWN the script's own", "LOADING the script's own words"} {
		_, err := master.Do(ctx, "DEL", key)
		require.NoError(t, err)
		_, err = b.Eval(ctx, ch, movedThenFail, []string{key}, moved, own)
		require.Error(t, err, own)
		assert.Contains(t, err.Error(), own)
		n, err := master.Do(ctx, "GET", key)
		require.NoError(t, err)
		assert.Equal(t, "2", n, "%q: the script ran twice, once per reply of its own", own)
	}
}

// movedThenFail replies ARGV[1] the first time its counter is taken and
// ARGV[2] after that.
var movedThenFail = shardcast.NewScript(`
if redis.call('INCR', KEYS[1]) == 1 then return redis.error_reply(ARGV[1]) end
return redis.error_reply(ARGV[2])`)
