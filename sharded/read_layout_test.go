package sharded

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadLayout: ReadLayout shows no record where none is, the record
// and live broker of a running fleet on its control instance, and the
// re-layout under way while one is; it refuses an address or App no
// broker could use and reports an instance it cannot reach.
func TestReadLayout(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := shardcast.Agreement{App: "read-layout:", Heartbeat: relayoutHeartbeat}

	st, err := ReadLayout(ctx, ab[0], shardcast.ConnOptions{}, a)
	require.NoError(t, err)
	assert.Equal(t, shardcast.LayoutStatus{}, st, "no broker ran")

	b := newBroker(t, Config{Addrs: ab, Agreement: a})
	st, err = ReadLayout(ctx, ab[0], shardcast.ConnOptions{}, a)
	require.NoError(t, err)
	require.NotNil(t, st.Record)
	assert.Equal(t, b.Fingerprint(), st.Record.Fingerprint)
	assert.Equal(t, "sharded", st.Record.Engine)
	assert.Equal(t, ab, st.Record.Instances)
	assert.Len(t, st.Brokers, 1)
	assert.Nil(t, st.Relayout)

	st, err = ReadLayout(ctx, ab[1], shardcast.ConnOptions{}, a)
	require.NoError(t, err)
	assert.Nil(t, st.Record, "the record is on the control instance only")

	var during shardcast.LayoutStatus
	var duringErr error
	cfg := RelayoutConfig{ControlAddr: ab[0], To: abc, Agreement: a, OnPhase: func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			during, duringErr = ReadLayout(ctx, ab[0], shardcast.ConnOptions{}, a)
		}
	}}
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, duringErr)
	require.NotNil(t, during.Relayout, "read while the re-layout ran")
	assert.Equal(t, rep.ID, during.Relayout.ID)
	assert.Equal(t, abc, during.Relayout.To.Instances)
	assert.Equal(t, ab, during.Record.Instances, "the record holds the old list until the finish")
	st, err = ReadLayout(ctx, ab[0], shardcast.ConnOptions{}, a)
	require.NoError(t, err)
	assert.Nil(t, st.Relayout)
	assert.Equal(t, abc, st.Record.Instances)

	for _, bad := range []struct {
		addr string
		a    shardcast.Agreement
	}{{"", a}, {"redis//" + ab[0], a}, {ab[0], shardcast.Agreement{App: "{x}"}}} {
		_, err := ReadLayout(ctx, bad.addr, shardcast.ConnOptions{}, bad.a)
		assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "%q %q", bad.addr, bad.a.App)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = ReadLayout(ctx, down, shardcast.ConnOptions{DialTimeout: time.Second}, a)
	assert.ErrorContains(t, err, "control instance "+down)
}
