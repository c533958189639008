package cluster

import (
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/require"
)

// TestLinksReconnectedTogetherConfirmEachOther kills the subscribe
// connections on every master (CLIENT KILL TYPE pubsub, as a network blip
// would) while the test holds the broker's lock, so that the maintenance
// pass cannot poll until every link has reconnected and waits for its
// confirmation. The pass's slot map then comes from one of those nodes:
// it confirms the others, not itself (a master restarted with a stale
// slot table would vouch for itself). Another node must be asked about
// it at once, not a RecoveryInterval later (a minute here): CLUSTER SLOTS
// reaches two masters, and every channel delivers again.
func TestLinksReconnectedTogetherConfirmEachOther(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	conn := faultConn
	conn.ReconnectMin, conn.ReconnectMax = 5*time.Millisecond, 20*time.Millisecond
	conn.RecoveryInterval = time.Minute
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Conn: conn, Options: shardcast.Options{Handler: rec.handle}})
	ctx := testCtx(t, time.Minute)
	channels := channelsPerPartition(sub.Layout(), 1, "rt.")
	require.NoError(t, sub.Subscribe(ctx, channels...))
	masters, err := c.Masters(ctx)
	require.NoError(t, err)

	sub.mu.Lock()
	for _, m := range masters {
		if _, err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			sub.mu.Unlock()
			t.Fatal(err)
		}
	}
	waiting := waitFor(10*time.Second, func() bool {
		n := 0
		for _, links := range sub.nodes {
			for _, l := range links {
				if !l.Unconfirmed() {
					return false
				}
				n++
			}
		}
		return n >= len(masters)
	})
	slotsAsked := map[string]int64{}
	for _, m := range masters {
		slotsAsked[m.Addr()] = commandCalls(t, m, "cluster|slots")
	}
	sub.mu.Unlock()
	require.True(t, waiting, "the links never all waited for their confirmation at once")
	killed := time.Now()

	require.True(t, waitFor(10*time.Second, func() bool { return !sub.core.Degraded() }),
		"the broker stayed degraded: a link waits for the next RecoveryInterval")
	t.Logf("FIGURE every link confirmed and every path active %v after the lock was released", time.Since(killed).Round(time.Millisecond))
	var answered []string
	for _, m := range masters {
		if commandCalls(t, m, "cluster|slots") > slotsAsked[m.Addr()] {
			answered = append(answered, m.Addr())
		}
	}
	require.GreaterOrEqual(t, len(answered), 2,
		"the node that answered was not asked about by another: CLUSTER SLOTS went only to %v", answered)
	publishAll(t, sub, channels, "after")
	rec.waitSilentSince(t, channels, killed, 10*time.Second)
}
