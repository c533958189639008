package centrifugebroker

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// engines returns, for each engine, a Config on test servers: the shared
// 3-master cluster with one replica each, and two standalone instances
// started for the test.
func engines(t *testing.T) map[string]func() Config {
	return map[string]func() Config{
		"cluster": func() Config {
			return Config{Cluster: &cluster.Config{Addrs: redistest.OnDemandCluster()}}
		},
		"sharded": func() Config {
			a, b := redistest.StartStandalone(t), redistest.StartStandalone(t)
			return Config{Sharded: &sharded.Config{Addrs: []string{a.Addr(), b.Addr()}}}
		},
	}
}

// TestAcrossNodes runs three server nodes on one engine and checks that
// what happens on one node reaches clients of the others: server-side and
// client-side publications, join and leave messages, and control messages
// (node discovery, a server-side disconnect of a user on another node).
func TestAcrossNodes(t *testing.T) {
	for name, config := range engines(t) {
		t.Run(name, func(t *testing.T) {
			nodes := startNodes(t, 3, config())
			a, b, c := nodes[0], nodes[1], nodes[2]
			ch := "across-" + name

			onA := connect(t, a, "alice")
			subA := onA.subscribe(t, ch)[0]

			t.Run("ServerPublish", func(t *testing.T) {
				_, err := b.node.Publish(ch, []byte("from node B"))
				require.NoError(t, err)
				waitFor(t, func() bool { return subA.has("from node B") },
					func() string { return fmt.Sprintf("alice on A got %q", subA.received()) })
			})

			onB := connect(t, b, "bob")
			subB := onB.subscribe(t, ch)[0]

			t.Run("JoinCrossesNodes", func(t *testing.T) {
				waitFor(t, func() bool { joins, _, _, _ := subA.events(); return slices.Contains(joins, "bob") },
					func() string { joins, _, _, _ := subA.events(); return fmt.Sprintf("alice on A saw joins %q", joins) })
			})

			t.Run("ClientPublish", func(t *testing.T) {
				_, err := subB.sub.Publish(context.Background(), []byte("from bob"))
				require.NoError(t, err)
				waitFor(t, func() bool { return subA.has("from bob") },
					func() string { return fmt.Sprintf("alice on A got %q", subA.received()) })
			})

			t.Run("LeaveCrossesNodes", func(t *testing.T) {
				require.NoError(t, subB.sub.Unsubscribe())
				waitFor(t, func() bool { _, leaves, _, _ := subA.events(); return slices.Contains(leaves, "bob") },
					func() string {
						_, leaves, _, _ := subA.events()
						return fmt.Sprintf("alice on A saw leaves %q", leaves)
					})
			})

			t.Run("DisconnectOnAnotherNode", func(t *testing.T) {
				onC := connect(t, c, "carol")
				require.NoError(t, a.node.Disconnect("carol", centrifuge.WithCustomDisconnect(centrifuge.DisconnectForceNoReconnect)))
				waitFor(t, func() bool { return slices.Contains(onC.disconnectCodes(), centrifuge.DisconnectForceNoReconnect.Code) },
					func() string { return fmt.Sprintf("carol on C disconnected with codes %v", onC.disconnectCodes()) })
				// alice, on the issuing node, and bob are untouched.
				assert.Empty(t, onA.disconnectCodes())
				assert.Empty(t, onB.disconnectCodes())
			})

			for _, nd := range nodes {
				assert.Zero(t, nd.broker.Stats().BadFrames)
			}
		})
	}
}
