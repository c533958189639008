package sharded

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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := redistest.ReadOnlyScripts(ctx, s)
	require.NoError(t, err)
	return n
}

// TestEvalRO: with SubscribeOn Replicas a read-only script runs on the
// replica of the Sentinel shard the broker subscribes on, and the master
// serves none; once that replica is killed the same call is answered
// elsewhere without an error. On a shard subscribed on its master the
// read runs there as Eval. A script that writes fails without being sent
// elsewhere.
func TestEvalRO(t *testing.T) {
	t.Parallel()
	r := redistest.StartReplicated(t, 2)
	s := redistest.StartSentinels(t, 3, redistest.SentinelGroup{Name: "a", Servers: r})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newBroker(t, Config{Addrs: []string{s.URL("a")}, SubscribeOn: Replicas, Agreement: shardcast.Agreement{Off: true},
		Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
	const ch, key = "ro.channel", "ro.key"
	_, err := b.Eval(ctx, ch, writeKey, []string{key}, "v1")
	require.NoError(t, err)
	waitFor(t, "broker subscribed on a replica", func() bool { return b.SubscribedOn()[0] != r.Master().Addr() })
	replica := r.Node(b.SubscribedOn()[0])
	require.NotNil(t, replica)

	waitFor(t, "the replica to answer v1", func() bool {
		v, err := b.EvalRO(ctx, ch, readKey, []string{key})
		return err == nil && v == "v1"
	})
	onReplica, onMaster := roCalls(t, replica), roCalls(t, r.Master())
	for range 20 {
		v, err := b.EvalRO(ctx, ch, readKey, []string{key})
		require.NoError(t, err)
		assert.Equal(t, "v1", v)
	}
	assert.Equal(t, onReplica+20, roCalls(t, replica), "the replica served the reads")
	assert.Equal(t, onMaster, roCalls(t, r.Master()), "the master served none")

	_, err = b.EvalRO(ctx, ch, writeKey, []string{key}, "v2")
	require.Error(t, err, "a writing script ran read-only")
	v, err := b.Eval(ctx, ch, readKey, []string{key})
	require.NoError(t, err)
	assert.Equal(t, "v1", v, "the writing script was run elsewhere")

	require.NoError(t, replica.Kill())
	for range 20 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := b.EvalRO(rctx, ch, readKey, []string{key})
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "v1", v)
	}

	m := newBroker(t, Config{Addrs: []string{r.Master().Addr()}, Agreement: shardcast.Agreement{Off: true},
		Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
	onMaster = roCalls(t, r.Master())
	v, err = m.EvalRO(ctx, ch, readKey, []string{key})
	require.NoError(t, err)
	assert.Equal(t, "v1", v)
	assert.Equal(t, onMaster, roCalls(t, r.Master()), "on its master the read runs as Eval")
}
