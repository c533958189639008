package centrifugebroker

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPresenceAcrossNodes runs two Centrifuge nodes with the adapter's
// Broker and PresenceManager on one engine: real clients subscribe with
// presence on either node, and both the other node (Node.Presence,
// Node.PresenceStats) and clients asking through it see them, until they
// unsubscribe. Once with a channel that maps users, once without.
func TestPresenceAcrossNodes(t *testing.T) {
	for name, config := range engines(t) {
		t.Run(name, func(t *testing.T) {
			cfg := config()
			pcfg := &PresenceConfig{UserMapping: mapped}
			a, b := startNodeWith(t, cfg, pcfg, false), startNodeWith(t, cfg, pcfg, false)
			for _, ch := range []string{"presence-" + name, mapPrefix + "presence-" + name} {
				t.Run(ch, func(t *testing.T) { testPresenceAcrossNodes(t, a, b, ch) })
			}
		})
	}
}

// presentUsers returns the user IDs present in ch as nd's node sees them, sorted.
func presentUsers(nd *testNode, ch string) ([]string, error) {
	res, err := nd.node.Presence(ch)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, info := range res.Presence {
		users = append(users, info.UserID)
	}
	slices.Sort(users)
	return users, nil
}

func testPresenceAcrossNodes(t *testing.T, a, b *testNode, ch string) {
	waitUsers := func(nd *testNode, want ...string) {
		t.Helper()
		var got []string
		var err error
		waitFor(t, func() bool { got, err = presentUsers(nd, ch); return err == nil && slices.Equal(got, want) },
			func() string { return fmt.Sprintf("presence of %s: %q (err %v), want %q", ch, got, err, want) })
	}
	alice := connect(t, a, "alice").subscribe(t, ch)[0]
	waitUsers(b, "alice")
	s, err := b.node.PresenceStats(ch)
	require.NoError(t, err)
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 1, NumUsers: 1}, s.PresenceStats)

	bob := connect(t, b, "bob").subscribe(t, ch)[0]
	connect(t, b, "alice").subscribe(t, ch) // alice's second connection
	waitUsers(a, "alice", "alice", "bob")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	p, err := bob.sub.Presence(ctx)
	require.NoError(t, err)
	var users []string
	for client, info := range p.Clients {
		assert.Equal(t, client, info.Client)
		users = append(users, info.User)
	}
	slices.Sort(users)
	assert.Equal(t, []string{"alice", "alice", "bob"}, users, "presence as bob on B sees it")
	ps, err := alice.sub.PresenceStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, ps.NumClients)
	assert.Equal(t, 2, ps.NumUsers, "unique users, as alice on A sees them")

	// Unsubscribing removes a client's entry at once, not at its TTL.
	require.NoError(t, alice.sub.Unsubscribe())
	waitUsers(b, "alice", "bob")
	require.NoError(t, bob.sub.Unsubscribe())
	waitUsers(a, "alice")
	s, err = a.node.PresenceStats(ch)
	require.NoError(t, err)
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 1, NumUsers: 1}, s.PresenceStats)
}
