package centrifugebroker

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMapWebSocketMetaExpiry runs the centrifuge-js map client (see
// TestMapWebSocket) on a channel whose keys, stream and meta lapse
// mapLapseTTL after its last call, on each engine. Its meta expires, and
// with it the epoch, once while the client is subscribed and once while
// it is disconnected; each time the next publish starts a new epoch at
// offset 1, so the position the client holds names an epoch that is gone.
//   - Subscribed: the new epoch's first publication reaches the client
//     live and tells its node the epoch changed; the client is made to
//     resubscribe, its recovery is refused, and it re-syncs.
//   - Disconnected: the new epoch gets more publications than the old one
//     had, so that only the epoch tells the client's position from one of
//     the new epoch; the client reconnects, tries to recover from the old
//     epoch, is refused, and re-syncs.
//
// Each step ends with the client's view equal to the server's state read
// afresh, offsets included, the client subscribed at the new epoch.
func TestMapWebSocketMetaExpiry(t *testing.T) {
	findMapClient(t)
	for name, start := range mapEngines() {
		t.Run(name, func(t *testing.T) {
			env := start(t)
			a := startNodeWith(t, env.cfg, nil, true)
			b := startNodeWith(t, env.cfg, nil, true)
			ch := mapLapse + "ws-" + name
			for i := range 3 {
				mapWSPublish(t, a.node, ch, fmt.Sprintf("old-%d", i), strconv.Quote(fmt.Sprintf("old-%d", i)))
			}
			mc := startMapWSClient(t, b.url, ch)
			require.Len(t, waitSameState(t, mc, a.node, ch), 3)

			t.Run("Subscribed", func(t *testing.T) {
				syncs, subscribing := mc.count("sync"), mc.count("subscribing")
				old := lapseMeta(t, env, a.node, ch)
				mapWSPublish(t, a.node, ch, "new-0", `"new-0"`)
				checkResynced(t, mc, a.node, ch, old, syncs)
				assert.Greater(t, mc.count("subscribing"), subscribing, "the client was made to resubscribe")
				t.Log(mc.describe())
			})

			t.Run("Disconnected", func(t *testing.T) {
				disconnected := mc.count("disconnected")
				mc.send(t, "disconnect")
				waitFor(t, func() bool { return mc.count("disconnected") > disconnected }, mc.describe)
				syncs := mc.count("sync")
				old := lapseMeta(t, env, a.node, ch)
				for i := range old.Offset + 2 {
					r := mapWSPublish(t, a.node, ch, fmt.Sprintf("new-%d", i), strconv.Quote(fmt.Sprintf("again-%d", i)))
					require.Equal(t, i+1, r.Position.Offset, "a new epoch from offset 1")
				}
				events, _ := mc.snapshot()
				mc.send(t, "connect")
				checkResynced(t, mc, a.node, ch, old, syncs)
				after, _ := mc.snapshot()
				recovering := false
				for _, e := range after[len(events):] {
					recovering = recovering || e.Ev == "cmd" && e.Recover && e.Epoch == old.Epoch
				}
				assert.True(t, recovering, "the client tried to recover from its position in the old epoch: %s", mc.describe())
				t.Log(mc.describe())
			})
		})
	}
}

// lapseMeta returns ch's position, then waits until ch's meta is gone
// from its Redis server: expired, MetaTTL after the last call on ch. The
// wait looks at the key itself, since any call on ch would renew it.
func lapseMeta(t *testing.T, env *mapEnv, node *centrifuge.Node, ch string) centrifuge.StreamPosition {
	t.Helper()
	_, pos, err := serverState(t, node, ch)
	require.NoError(t, err)
	require.NotEmpty(t, pos.Epoch)
	meta := mapKeyNames(t, env.a.m, ch)[0]
	srv := env.serverOf(ch)
	waitFor(t, func() bool {
		v, err := srv.Do(bg, "EXISTS", meta)
		return err == nil && v == int64(0)
	}, func() string { return "the meta of " + ch + " to expire" })
	return pos
}

// checkResynced waits until the client's view equals ch's state on node,
// and checks that ch is at another epoch than old, and that the client
// re-synced from the state (more syncs than before) and is subscribed at
// ch's epoch.
func checkResynced(t *testing.T, mc *mapWSClient, node *centrifuge.Node, ch string, old centrifuge.StreamPosition, syncs int) {
	t.Helper()
	waitSameState(t, mc, node, ch)
	_, now, err := serverState(t, node, ch)
	require.NoError(t, err)
	assert.NotEqual(t, old.Epoch, now.Epoch, "the meta's expiry started a new epoch")
	assert.Greater(t, mc.count("sync"), syncs, "the client re-synced from the state: %s", mc.describe())
	last, _ := mc.last("subscribed")
	assert.Equal(t, now.Epoch, last.Epoch, "the client is subscribed at the new epoch")
}
