package sharded

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/relayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSentinelShardUnnamed: a transition or a layout record that names a
// Sentinel shard without its Sentinels, as a version that did not record
// them writes, loses nothing silently. A re-layout adding such a shard is
// refused by every broker in an EventError wrapping ErrInvalidConfig and
// ends aborted, the brokers on their old layout; a re-layout away from
// such a shard finishes, its channels handed over after BarrierTimeout
// (no barrier can be sent through it); and a Follow broker refuses such a
// record, naming the shard.
func TestSentinelShardUnnamed(t *testing.T) {
	t.Parallel()
	s, groups := sentinelShards(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app := shardcast.Agreement{App: "sentinel.unnamed:", Heartbeat: relayoutHeartbeat}
	cfg := Config{Addrs: []string{s.URL("a")}, Conn: faultConn, Agreement: app}
	fleet := newFaultFleet(t, 2, cfg, channelNames("su.", 100))
	fleet.WaitPublished(1000)
	control := groups["a"].Master()
	onA := fleet.Brokers[0].(*Broker).Fingerprint()

	// A coordinator that does not record Sentinels adds shard b.
	add := RelayoutConfig{ControlAddr: s.URL("a"), Agreement: app, Conn: faultConn, To: []string{s.URL("a"), s.URL("b")}}
	actx, acancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := relayout.Relayout(actx, app, nil, func(ctx context.Context) (relayout.Mover, error) {
		c, err := openMover(ctx, add)
		if err == nil {
			clear(c.sentinels)
		}
		return c, err
	})
	acancel()
	require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	for i, x := range fleet.Brokers {
		assert.Equal(t, onA, x.(*Broker).Fingerprint(), "broker %d stays on shard a", i)
		refused := false
		for _, e := range fleet.Events[i].Of(shardcast.EventError) {
			refused = refused || (errors.Is(e.Err, shardcast.ErrInvalidConfig) && strings.Contains(e.Err.Error(), "sentinel/b"))
		}
		assert.True(t, refused, "broker %d raises the refusal", i)
	}
	fleet.WaitPublished(fleet.Published() + 1000)

	// The record loses shard a's Sentinels; a re-layout away from a
	// finishes without a barrier through it.
	_, err = control.Do(ctx, "HDEL", app.RecordKey(), "sentinels")
	require.NoError(t, err)
	onB, err := Fingerprint([]string{s.URL("b")})
	require.NoError(t, err)
	rep, err := Relayout(ctx, RelayoutConfig{ControlAddr: s.URL("a"), Agreement: app, Conn: faultConn, To: []string{s.URL("b")}})
	require.NoError(t, err)
	require.False(t, rep.Aborted)
	for i, x := range fleet.Brokers {
		b := x.(*Broker)
		waitFor(t, "every broker on shard b", func() bool { return b.Fingerprint() == onB })
		assert.Equal(t, groups["b"].Master().Addr(), dialOf(b, "sentinel/b"), "broker %d publishes to b's master", i)
	}
	waitFor(t, "the report that the hand-over waited for BarrierTimeout", func() bool {
		return fleet.ReportedPhase(shardcast.PhaseBarrierTimeout)
	})
	fleet.WaitPublished(fleet.Published() + 1000)

	// A record naming shard b without its Sentinels cannot be followed by
	// a broker that knows shard a only.
	_, err = control.Do(ctx, "HDEL", app.RecordKey(), "sentinels")
	require.NoError(t, err)
	follow := app
	follow.Follow = true
	_, err = New(Config{Addrs: []string{s.URL("a")}, Agreement: follow})
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	assert.ErrorContains(t, err, "Sentinel master sentinel/b")

	fleet.FinishClean(faultTolerance)
}
