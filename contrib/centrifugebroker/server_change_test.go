package centrifugebroker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lossCase is a way for a channel's server to lose its last history
// write: lose runs it (and returns once the channel's server answers
// again) after the test published "a" and "b" and before "lost", which
// the server acknowledges and then loses with the second step, done.
type lossCase struct {
	env  func(t *testing.T, cfg Config) *historyEnv
	lose func(t *testing.T, env *historyEnv, ch string) (done func())
}

// checkServerChange publishes a, b and lost on a channel whose server then
// loses lost (see lossCase), and publishes new. With
// Config.NewEpochOnServerChange new starts a new epoch at offset 1, and a
// client that had lost's position cannot be told it recovered; without, the
// epoch goes on and lost's offset is given out again (the documented
// weakness the option closes).
func checkServerChange(t *testing.T, lc lossCase, strict bool) {
	env := lc.env(t, Config{NewEpochOnServerChange: strict})
	b := env.b
	ch := historyChannelPrefix + "server-change-" + strconv.FormatBool(strict)
	opts := withHistory(100, time.Minute)
	var first centrifuge.PublishResult
	for i, d := range []string{"a", "b"} {
		res, err := b.Publish(ch, []byte(d), opts)
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), res.Offset)
		first = res
	}
	done := lc.lose(t, env, ch)
	lost, err := b.Publish(ch, []byte("lost"), opts)
	require.NoError(t, err)
	require.Equal(t, centrifuge.StreamPosition{Offset: 3, Epoch: first.Epoch}, lost.StreamPosition)
	done()

	var next centrifuge.PublishResult
	waitFor(t, func() bool {
		next, err = b.Publish(ch, []byte("new"), opts)
		return err == nil
	}, func() string { return "a publish after the loss: " + err.Error() })
	pubs, top, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Since: &lost.StreamPosition, Limit: -1}})
	require.NoError(t, err)
	t.Logf("lost %+v, next %+v; history since lost: %d publications, top %+v", lost.StreamPosition, next.StreamPosition, len(pubs), top)
	if !strict {
		assert.Equal(t, centrifuge.StreamPosition{Offset: 3, Epoch: lost.Epoch}, next.StreamPosition, "the default keeps the epoch: offset 3 again")
		return
	}
	assert.NotEqual(t, lost.Epoch, next.Epoch, "a new epoch")
	assert.Equal(t, uint64(1), next.Offset, "the history starts over")
	assert.Equal(t, centrifuge.StreamPosition{Offset: 1, Epoch: next.Epoch}, top)
	all, _, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: -1}})
	require.NoError(t, err)
	assert.Equal(t, []string{"1:new"}, datas(all), "nothing of the old epoch is served")

	// The server is the same from now on: the epoch stays.
	again, err := b.Publish(ch, []byte("again"), opts)
	require.NoError(t, err)
	assert.Equal(t, centrifuge.StreamPosition{Offset: 2, Epoch: next.Epoch}, again.StreamPosition)
}

// TestNewEpochOnServerChange: a failover whose replica missed the last
// write (cluster), and a restart from the last snapshot (sharded), each
// with and without Config.NewEpochOnServerChange.
func TestNewEpochOnServerChange(t *testing.T) {
	var c *redistest.Cluster // the failover case's, of the subtest running
	failover := lossCase{
		env: func(t *testing.T, cfg Config) *historyEnv {
			c = redistest.StartCluster(t, 3, 1)
			cfg.Cluster = &cluster.Config{Addrs: c.Seeds()}
			return newHistoryEnv(t, cfg, func(*Broker, string) *redistest.Server { return nil })
		},
		lose: func(t *testing.T, env *historyEnv, ch string) func() {
			ctx, cancel := context.WithTimeout(t.Context(), 4*waitTimeout)
			t.Cleanup(cancel)
			l := env.b.engine.(*cluster.Broker).Layout()
			victim, err := c.MasterOfSlot(ctx, l.Slot(l.Partition(ch)))
			require.NoError(t, err)
			replicas, err := c.ReplicasOf(ctx, victim)
			require.NoError(t, err)
			require.Len(t, replicas, 1)
			replica := replicas[0]
			waitFor(t, func() bool {
				m, err1 := victim.Info(ctx, "replication")
				r, err2 := replica.Info(ctx, "replication")
				return err1 == nil && err2 == nil && r["slave_repl_offset"] == m["master_repl_offset"]
			}, func() string { return "the replica to catch up" })
			// Frozen and cut off, the replica misses what follows.
			require.NoError(t, replica.Pause())
			_, err = victim.Do(ctx, "CLIENT", "KILL", "TYPE", "replica")
			require.NoError(t, err)
			return func() {
				require.NoError(t, victim.Kill())
				require.NoError(t, replica.Resume())
				promoted, err := c.WaitFailover(ctx, victim)
				require.NoError(t, err)
				require.Equal(t, replica, promoted)
			}
		},
	}
	restart := lossCase{
		env: func(t *testing.T, cfg Config) *historyEnv {
			s := redistest.StartStandalone(t)
			cfg.Sharded = &sharded.Config{Addrs: []string{s.Addr()}}
			return newHistoryEnv(t, cfg, func(*Broker, string) *redistest.Server { return s })
		},
		lose: func(t *testing.T, env *historyEnv, ch string) func() {
			s := env.serverOf(ch)
			_, err := s.Do(t.Context(), "SAVE")
			require.NoError(t, err)
			return func() {
				require.NoError(t, s.Kill())
				require.NoError(t, s.Restart(t.Context())) // loads the snapshot, without lost
			}
		},
	}
	for _, strict := range []bool{true, false} {
		t.Run("failover/"+strconv.FormatBool(strict), func(t *testing.T) { checkServerChange(t, failover, strict) })
		t.Run("restart/"+strconv.FormatBool(strict), func(t *testing.T) { checkServerChange(t, restart, strict) })
	}
}
