package centrifugebroker

import (
	"context"
	"sync"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forwarding records the map publications a node's MapBroker delivers and
// hands them on to the node, recording what the node answers.
type forwarding struct {
	node *centrifuge.Node
	mu   sync.Mutex
	pubs []*centrifuge.Publication
	errs []error
}

func (f *forwarding) HandlePublication(ch string, pub *centrifuge.Publication, sp centrifuge.StreamPosition, delta bool, prev *centrifuge.Publication) error {
	err := f.node.HandlePublication(ch, pub, sp, delta, prev)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pubs, f.errs = append(f.pubs, pub), append(f.errs, err)
	return err
}
func (f *forwarding) HandleJoin(string, *centrifuge.ClientInfo) error  { return nil }
func (f *forwarding) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

// startMapNode runs a Centrifuge node with a Broker and MapBroker on cfg;
// node.Shutdown, at the test's end, closes both.
func startMapNode(t *testing.T, cfg Config) (*centrifuge.Node, *MapBroker) {
	t.Helper()
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelNone,
		Metrics:  centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
		Map:      centrifuge.MapConfig{GetMapChannelOptions: mapChannelOptions},
	})
	require.NoError(t, err)
	b, err := New(node, cfg)
	require.NoError(t, err)
	node.SetBroker(b)
	mb, err := NewMapBroker(b, MapConfig{})
	require.NoError(t, err)
	node.SetMapBroker(mb)
	require.NoError(t, node.Run())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, node.Shutdown(ctx))
	})
	return node, mb
}

// TestMapNode runs the MapBroker under real Centrifuge nodes (Broker and
// MapBroker set, node.Run registering the node as the MapBroker's
// handler) on both engines: the node's map API works through it, and a
// publication on one node reaches the other node's handler, which takes
// it. centrifuge-go v0.12.1 has no map subscriptions, so no WebSocket
// client takes part here; TestMapWebSocket runs a centrifuge-js one.
func TestMapNode(t *testing.T) {
	for name, start := range mapEngines() {
		t.Run(name, func(t *testing.T) {
			env := start(t) // its servers; the nodes below are its cfg's
			a, _ := startMapNode(t, env.cfg)
			b, mbB := startMapNode(t, env.cfg)
			h := mbB.events.Load()
			require.NotNil(t, h, "node.Run registers the node")
			assert.Same(t, b, (*h).(*centrifuge.Node))
			fw := &forwarding{node: b}
			require.NoError(t, mbB.RegisterEventHandler(fw))

			ch := mapRecoverable + "node"
			require.NoError(t, mbB.Subscribe(ch))
			r, err := a.MapPublish(bg, ch, "k", centrifuge.MapPublishOptions{Data: []byte("v1")})
			require.NoError(t, err)
			assert.Equal(t, uint64(1), r.Position.Offset)
			st, err := a.MapStateRead(bg, ch, centrifuge.MapReadStateOptions{Limit: -1})
			require.NoError(t, err)
			require.Len(t, st.Publications, 1)
			assert.Equal(t, "v1", string(st.Publications[0].Data))
			stats, err := a.MapStats(bg, ch)
			require.NoError(t, err)
			assert.Equal(t, 1, stats.NumKeys)
			_, err = a.MapRemove(bg, ch, "k", centrifuge.MapRemoveOptions{})
			require.NoError(t, err)
			sr, err := a.MapStreamRead(bg, ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Limit: -1}})
			require.NoError(t, err)
			assert.Equal(t, []string{"1:k:v1", "2:k:removed"}, streamLines(sr.Publications))

			waitFor(t, func() bool {
				fw.mu.Lock()
				defer fw.mu.Unlock()
				return len(fw.pubs) >= 2
			}, func() string { return "node b to receive both publications" })
			fw.mu.Lock()
			assert.Equal(t, []error{nil, nil}, fw.errs, "node b took them")
			assert.Equal(t, "v1", string(fw.pubs[0].Data))
			assert.True(t, fw.pubs[1].Removed)
			fw.mu.Unlock()
			require.NoError(t, a.MapClear(bg, ch, centrifuge.MapClearOptions{}))
			stats, err = a.MapStats(bg, ch)
			require.NoError(t, err)
			assert.Equal(t, 0, stats.NumKeys)
		})
	}
}
