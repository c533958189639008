package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMapServerDown kills the Redis server of a map channel and restarts
// it, on each engine: while it is down every call fails; once it is back
// the calls work again. Without persistence the restart lost the
// channel's meta, so the channel has a new epoch and a client's old
// position is unrecoverable; with every write kept, the epoch goes on.
func TestMapServerDown(t *testing.T) {
	for name, start := range mapEngines() {
		for _, persist := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/persistent=%v", name, persist), func(t *testing.T) {
				var opts []redistest.Option
				if persist {
					opts = append(opts, persistent)
				}
				env := start(t, opts...)
				testMapServerDown(t, env, mapRecoverable+"down", persist)
			})
		}
	}
}

func testMapServerDown(t *testing.T, env *mapEnv, ch string, persist bool) {
	m := env.a.m
	require.NoError(t, env.b.m.Subscribe(ch))
	before := publish(t, m, ch, "k", "v1", centrifuge.MapPublishOptions{})
	victim := env.serverOf(ch)
	require.NoError(t, victim.Kill())

	_, err := m.Publish(bg, ch, "k", centrifuge.MapPublishOptions{Data: []byte("v2")})
	assert.Error(t, err, "Publish while down")
	_, err = m.Remove(bg, ch, "k", centrifuge.MapRemoveOptions{})
	assert.Error(t, err, "Remove while down")
	_, err = m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Limit: -1})
	assert.Error(t, err, "ReadState while down")
	_, err = m.ReadStream(bg, ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Limit: -1}})
	assert.Error(t, err, "ReadStream while down")
	_, err = m.Stats(bg, ch)
	assert.Error(t, err, "Stats while down")
	assert.Error(t, m.Clear(bg, ch, centrifuge.MapClearOptions{}), "Clear while down")

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, env.restart(ctx, victim))
	var r centrifuge.MapStateResult
	waitFor(t, func() bool {
		r, err = m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Limit: -1, Revision: &before.Position})
		return err == nil || errors.Is(err, centrifuge.ErrorUnrecoverablePosition)
	}, func() string { return fmt.Sprintf("ReadState to work again: %v", err) })
	if persist {
		require.NoError(t, err)
		assert.Equal(t, before.Position, r.Position, "the epoch goes on")
		require.Len(t, r.Publications, 1)
		assert.Equal(t, "v1", string(r.Publications[0].Data))
	} else {
		assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition, "the restart lost the channel")
		s, sp := state(t, m, ch)
		assert.Empty(t, s)
		assert.NotEqual(t, before.Position.Epoch, sp.Epoch)
	}
	// Live delivery resumes once the node's subscription is back.
	waitFor(t, func() bool {
		_, err := m.Publish(bg, ch, "after", centrifuge.MapPublishOptions{Data: []byte("a")})
		if err != nil {
			return false
		}
		for _, p := range env.b.rec.get(ch) {
			if p.pub.Key == "after" {
				return true
			}
		}
		return false
	}, func() string { return "a publication after the restart to reach node b" })
}
