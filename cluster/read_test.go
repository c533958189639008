package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readKey replies the value of its key; it writes nothing, so EVAL_RO
// takes it.
var readKey = shardcast.NewScript(`return redis.call('GET', KEYS[1])`)

// writeKey sets its key: EVAL_RO refuses it on every node.
var writeKey = shardcast.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)

// roCalls counts the read-only script calls s has served.
func roCalls(t *testing.T, s *redistest.Server) int64 {
	n, err := redistest.ReadOnlyScripts(testCtx(t, 5*time.Second), s)
	require.NoError(t, err)
	return n
}

// readNode returns the node b subscribes channel's partition on.
func (b *Broker) readNode(channel string) string {
	p := b.view.Load().cur.Partition(channel)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.subs[p]
}

// TestEvalRO: with SubscribeOn Replicas a read-only script runs on the
// replica the broker subscribes the channel on, and its master serves
// none; once that replica is killed the same call is answered by the
// master. With Masters it runs on the master. A script that writes fails
// without being sent elsewhere, and a key outside the channel's slot is
// refused before anything is sent.
func TestEvalRO(t *testing.T) {
	c := replicaCluster(t)
	ctx := testCtx(t, time.Minute)
	node := func(addr string) *redistest.Server {
		for _, n := range c.Nodes() {
			if n.Addr() == addr {
				return n
			}
		}
		t.Fatalf("no node %s", addr)
		return nil
	}
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: c.Seeds(), SubscribeOn: Replicas, Agreement: shardcast.Agreement{Off: true},
		TopologyInterval: time.Second, Options: shardcast.Options{Raw: true, Handler: rec.handle}})
	ch := "ro.channel"
	key := counterKey(b, ch)
	_, err := b.Eval(ctx, ch, writeKey, []string{key}, "v1")
	require.NoError(t, err)
	master, err := c.MasterOfSlot(ctx, b.Layout().Slot(b.Layout().Partition(ch)))
	require.NoError(t, err)
	replica := node(b.readNode(ch))
	require.NotEqual(t, master.Addr(), replica.Addr(), "SubscribeOn Replicas placed the partition on its master")

	require.True(t, waitFor(10*time.Second, func() bool {
		v, err := b.EvalRO(ctx, ch, readKey, []string{key})
		return err == nil && v == "v1"
	}), "the replica never answered v1")
	onReplica, onMaster := roCalls(t, replica), roCalls(t, master)
	for range 20 {
		v, err := b.EvalRO(ctx, ch, readKey, []string{key})
		require.NoError(t, err)
		assert.Equal(t, "v1", v)
	}
	assert.Equal(t, onReplica+20, roCalls(t, replica), "the replica served the reads")
	assert.Equal(t, onMaster, roCalls(t, master), "the master served none")

	_, err = b.EvalRO(ctx, ch, writeKey, []string{key}, "v2")
	require.Error(t, err, "a writing script ran read-only")
	v, err := b.Eval(ctx, ch, readKey, []string{key})
	require.NoError(t, err)
	assert.Equal(t, "v1", v, "the writing script was run elsewhere")
	_, err = b.EvalRO(ctx, ch, readKey, []string{"elsewhere"})
	assert.ErrorIs(t, err, ErrInvalidKey)
	_, err = b.EvalRO(ctx, ch, readKey, nil)
	assert.ErrorIs(t, err, ErrInvalidKey)

	// The replica dies: until the broker moves the partition to the other
	// replica, reads go to the master; none fails.
	require.NoError(t, replica.Kill())
	for range 20 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := b.EvalRO(rctx, ch, readKey, []string{key})
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "v1", v)
	}

	m := newBroker(t, Config{Addrs: c.Seeds(), Agreement: shardcast.Agreement{Off: true}, Options: shardcast.Options{Raw: true}})
	onMaster = roCalls(t, master)
	v, err = m.EvalRO(ctx, ch, readKey, []string{key})
	require.NoError(t, err)
	assert.Equal(t, "v1", v)
	stats, err := master.CommandStats(ctx)
	require.NoError(t, err)
	assert.Positive(t, stats["evalsha"]+stats["eval"], "with Masters the master serves the read")
	assert.Equal(t, onMaster, roCalls(t, master), "with Masters the read runs as Eval")
}
