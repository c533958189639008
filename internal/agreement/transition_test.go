package agreement

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdvanceRules: the advance script's answers other than "waiting":
// no live broker, a step already taken (its reply lost), a transition
// gone, and the refill after a gap in the coordinator's calls.
func TestAdvanceRules(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	ctx := context.Background()
	a := shardcast.Agreement{App: "advance-rules:", Heartbeat: time.Hour}.WithDefaults()
	one, two := shardcast.LayoutRecord{Fingerprint: "one", Engine: "sharded", Instances: []string{"a"}},
		shardcast.LayoutRecord{Fingerprint: "two", Engine: "sharded", Instances: []string{"a", "b"}}
	m, err := Join(ctx, config(run, a.App, one, nil))
	require.NoError(t, err)
	m.Leave() // the record stays, nobody is live

	res, err := Begin(ctx, run, a, "t1", "test", two)
	require.NoError(t, err)
	require.True(t, res.Begun)
	tr := &Transition{ID: "t1", ToRecord: two}

	got, err := Advance(ctx, run, a, tr, shardcast.PhasePrepare, shardcast.PhaseSwitch, "test", false)
	require.NoError(t, err)
	assert.Equal(t, AdvanceResult{NoBroker: true}, got, "no broker: wait")
	got, err = Advance(ctx, run, a, tr, shardcast.PhasePrepare, shardcast.PhaseSwitch, "test", true)
	require.NoError(t, err)
	assert.True(t, got.Advanced, "no broker, allowed")
	got, err = Advance(ctx, run, a, tr, shardcast.PhasePrepare, shardcast.PhaseSwitch, "test", false)
	require.NoError(t, err)
	assert.True(t, got.Advanced, "already in the phase asked for: a lost reply")
	_, err = Advance(ctx, run, a, tr, shardcast.PhasePrepare, shardcast.PhaseDrain, "test", false)
	assert.ErrorContains(t, err, "in phase switch, not prepare")

	// A call slower than a heartbeat but within HeartbeatsToExpire-1 of
	// the last is no gap: no broker can have expired meanwhile.
	now, err := s.Do(ctx, "TIME")
	require.NoError(t, err)
	secs, err := strconv.ParseInt(now.([]any)[0].(string), 10, 64)
	require.NoError(t, err)
	slow := strconv.FormatInt(secs*1000-int64(a.Heartbeat/time.Millisecond)*3/2, 10)
	_, err = s.Do(ctx, "HSET", layoutkey.Transition(a), "seen_at", slow)
	require.NoError(t, err)
	got, err = Advance(ctx, run, a, tr, shardcast.PhaseSwitch, shardcast.PhaseSwitch, "test", true)
	require.NoError(t, err)
	assert.True(t, got.Advanced, "1.5 heartbeats since the last call is no gap")
	refill, err := s.Do(ctx, "HGET", layoutkey.Transition(a), "refill_until")
	require.NoError(t, err)
	assert.Nil(t, refill, "no refill began")

	// A gap of more than HeartbeatsToExpire-1 heartbeats since the last
	// call: nothing moves for HeartbeatsToExpire heartbeats.
	_, err = s.Do(ctx, "HSET", layoutkey.Transition(a), "seen_at", "1")
	require.NoError(t, err)
	got, err = Advance(ctx, run, a, tr, shardcast.PhaseSwitch, shardcast.PhaseDrain, "test", true)
	require.NoError(t, err)
	assert.False(t, got.Advanced)
	assert.Greater(t, got.Refilling, 2*time.Hour, "refilling for HeartbeatsToExpire heartbeats")
	_, err = s.Do(ctx, "HDEL", layoutkey.Transition(a), "refill_until")
	require.NoError(t, err)
	got, err = Advance(ctx, run, a, tr, shardcast.PhaseSwitch, shardcast.PhaseDrain, "test", true)
	require.NoError(t, err)
	assert.True(t, got.Advanced, "once refilled")

	_, err = Abort(ctx, run, a, "t1")
	require.NoError(t, err)
	got, err = Advance(ctx, run, a, tr, shardcast.PhaseAbort, "done", "test", false)
	require.NoError(t, err)
	assert.True(t, got.Advanced, "an abort ends without brokers")
	got, err = Advance(ctx, run, a, tr, shardcast.PhaseAbort, "done", "test", false)
	require.NoError(t, err)
	assert.True(t, got.Advanced, "done, its reply lost")
	_, err = Advance(ctx, run, a, tr, shardcast.PhasePrepare, shardcast.PhaseSwitch, "test", true)
	assert.ErrorIs(t, err, shardcast.ErrRelayoutVanished)
}
