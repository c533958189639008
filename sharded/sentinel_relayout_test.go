package sharded

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dialOf returns the node b publishes to for shard id ("" when b does not
// use the shard).
func dialOf(b *Broker, id string) string {
	for i := range b.slots {
		if sh := b.slots[i].Load(); sh != nil && sh.addr == id {
			return sh.dial.Addr
		}
	}
	return ""
}

// TestSentinelRelayout: three brokers on Sentinel shard a alone are moved
// online to shards a and b, the coordinator reaching the control instance
// and the barrier's instance through the Sentinels: every message is
// delivered once or lost inside a reported window, the record keeps both
// shards' Sentinels, the added shard is followed through a failover, and
// a broker configured with shard a alone adopts the recorded list with
// Agreement.Follow.
func TestSentinelRelayout(t *testing.T) {
	t.Parallel()
	s, groups := sentinelShards(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app := shardcast.Agreement{App: "sentinel.relayout:", Heartbeat: relayoutHeartbeat}
	cfg := Config{Addrs: []string{s.URL("a")}, Conn: faultConn, Agreement: app}
	fleet := newFaultFleet(t, 3, cfg, channelNames("sr.", 150))
	fleet.WaitPublished(1500)

	to := []string{s.URL("a"), s.URL("b")}
	rep, err := Relayout(ctx, RelayoutConfig{ControlAddr: s.URL("a"), Agreement: app, Conn: faultConn, To: to})
	require.NoError(t, err)
	require.False(t, rep.Aborted)
	want, err := Fingerprint(to)
	require.NoError(t, err)
	for i, x := range fleet.Brokers {
		b := x.(*Broker)
		waitFor(t, "every broker on shards a and b", func() bool { return b.Fingerprint() == want })
		assert.Equal(t, []string{"sentinel/a", "sentinel/b"}, b.Instances(), "broker %d", i)
		assert.Equal(t, groups["b"].Master().Addr(), dialOf(b, "sentinel/b"), "broker %d publishes to b's master", i)
	}
	fields, _ := recordOn(t, groups["a"].Master(), app)
	assert.Equal(t, want, fields["fingerprint"])
	sentinels := strings.Join(s.Addrs(), ",")
	assert.Equal(t, "sentinel/a "+sentinels+"\nsentinel/b "+sentinels, fields["sentinels"], "the record keeps the Sentinels")
	fleet.WaitPublished(1500)

	// The shard the re-layout added is followed through a failover.
	newAddr := followKill(ctx, t, s, fleet, "b")

	// A broker that knows shard a only adopts the recorded list, reaching
	// b through the Sentinels the record gives.
	follow := app
	follow.Follow = true
	late, err := New(Config{Addrs: []string{s.URL("a")}, Agreement: follow})
	require.NoError(t, err)
	assert.Equal(t, want, late.Fingerprint())
	assert.Equal(t, newAddr, dialOf(late, "sentinel/b"))
	require.NoError(t, late.Close())

	fleet.FinishClean(faultTolerance)
}
