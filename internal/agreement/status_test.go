package agreement

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadStatus: the status shows no record for an application that
// never ran, then the record and broker a Join wrote, then the
// re-layout Begin started; a broker that left is no longer listed.
func TestReadStatus(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	ctx := context.Background()
	a := shardcast.Agreement{App: "status:", Heartbeat: time.Hour}.WithDefaults()

	st, err := ReadStatus(ctx, run, a)
	require.NoError(t, err)
	assert.Equal(t, shardcast.LayoutStatus{}, st, "nothing recorded")

	one := shardcast.LayoutRecord{Fingerprint: "one", Description: "sharded: 1 instance", Engine: "sharded", Instances: []string{"a:1"}}
	two := shardcast.LayoutRecord{Fingerprint: "two", Description: "sharded: 2 instances", Engine: "sharded", Instances: []string{"a:1", "b:1"}}
	m, err := Join(ctx, config(run, a.App, one, nil))
	require.NoError(t, err)
	st, err = ReadStatus(ctx, run, a)
	require.NoError(t, err)
	require.NotNil(t, st.Record)
	assert.Equal(t, "one", st.Record.Fingerprint)
	assert.Equal(t, []string{"a:1"}, st.Record.Instances)
	assert.Equal(t, []string{m.ID()}, st.Brokers)
	assert.Nil(t, st.Relayout)

	res, err := Begin(ctx, run, a, "t1", "relayout:test/1", two)
	require.NoError(t, err)
	require.True(t, res.Begun)
	st, err = ReadStatus(ctx, run, a)
	require.NoError(t, err)
	require.NotNil(t, st.Relayout)
	r := st.Relayout
	assert.Equal(t, "t1", r.ID)
	assert.Equal(t, shardcast.PhasePrepare, r.Phase)
	assert.Equal(t, "relayout:test/1", r.Coordinator)
	assert.Equal(t, "two", r.To.Fingerprint)
	assert.Equal(t, "sharded: 2 instances", r.To.Description)
	assert.Equal(t, []string{"a:1", "b:1"}, r.To.Instances)
	assert.False(t, r.StartedAt.IsZero())
	assert.False(t, r.PhaseAt.Before(r.StartedAt))
	assert.Equal(t, "one", st.Record.Fingerprint, "the record keeps the old layout until the finish")

	m.Leave()
	st, err = ReadStatus(ctx, run, a)
	require.NoError(t, err)
	assert.Empty(t, st.Brokers)
	assert.NotNil(t, st.Record, "the record outlives its brokers")

	_, err = ReadStatus(ctx, func(context.Context, *shardcast.Script, []string, []string) (any, error) {
		return nil, assert.AnError
	}, a)
	assert.ErrorIs(t, err, assert.AnError)
}
