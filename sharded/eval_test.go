package sharded

import (
	"context"
	"errors"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countAndPublish publishes a per-channel counter's next value to the
// channel and returns it, in one atomic step.
var countAndPublish = shardcast.NewScript("local n = redis.call('INCR', KEYS[1]); redis.call('PUBLISH', ARGV[1], tostring(n)); return n")

// TestEval: a script runs on the instance that carries its channel (sent
// whole once that server does not know it), its publish reaches the
// channel's subscribers, and bad input and Close are answered like
// Publish answers them.
func TestEval(t *testing.T) {
	servers := startServers(t, 3)
	rec := newRecorder()
	raw := shardcast.Options{Raw: true}
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Raw: true, Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: addrs(servers...), Options: raw})
	ctx := context.Background()
	chans := channelNames("eval:", 12)
	require.NoError(t, sub.Subscribe(ctx, chans...))

	for round := int64(1); round <= 2; round++ {
		for _, ch := range chans {
			if round == 2 && ch == chans[0] {
				// The server forgets its scripts: EVALSHA meets NOSCRIPT.
				_, err := servers[pub.Shard(ch)].Do(ctx, "SCRIPT", "FLUSH")
				require.NoError(t, err)
			}
			v, err := pub.Eval(ctx, ch, countAndPublish, []string{"count:" + ch}, pub.WireChannel(ch))
			require.NoError(t, err)
			assert.Equal(t, round, v)
		}
	}
	for _, ch := range chans {
		waitFor(t, "the scripts' publishes on "+ch, func() bool { return rec.count(ch) == 2 })
		for i, s := range servers {
			n, err := s.Do(ctx, "EXISTS", "count:"+ch)
			require.NoError(t, err)
			assert.Equal(t, int64(boolInt(i == pub.Shard(ch))), n, "count:%s on instance %d", ch, i)
		}
	}

	_, err := pub.Eval(ctx, "", countAndPublish, []string{"k"})
	assert.ErrorIs(t, err, shardcast.ErrInvalidChannel)
	_, err = pub.Eval(ctx, "x", shardcast.NewScript("return redis.call('NOSUCHCOMMAND')"), nil)
	assert.Error(t, err, "a script error is the call's error")
	require.NoError(t, pub.Close())
	_, err = pub.Eval(ctx, "x", countAndPublish, []string{"k"}, "x")
	assert.True(t, errors.Is(err, shardcast.ErrClosed), "after Close: %v", err)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestEvalScriptErrorNamedNoScript: a script that ran and replied an
// error of its own starting with NOSCRIPT is not taken for a cache miss
// and run again with EVAL: one Eval runs it once, and its error reaches
// the caller.
func TestEvalScriptErrorNamedNoScript(t *testing.T) {
	servers := startServers(t, 1)
	b := newBroker(t, Config{Addrs: addrs(servers...)})
	ctx := context.Background()
	s := shardcast.NewScript("redis.call('INCR', KEYS[1]); return redis.error_reply('NOSCRIPT from the script itself')")
	_, err := servers[0].Do(ctx, "SCRIPT", "LOAD", s.Source()) // EVALSHA finds it
	require.NoError(t, err)
	_, err = b.Eval(ctx, "ch", s, []string{"n"})
	require.ErrorContains(t, err, "NOSCRIPT from the script itself")
	v, err := servers[0].Do(ctx, "GET", "n")
	require.NoError(t, err)
	assert.Equal(t, "1", v, "runs of the script")
}
