package interop_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
)

// TestCrossLanguageClusterEndpointType: CLUSTER SLOTS reports a null
// endpoint (unknown-endpoint) or "?" (hostname preferred, none set); Go
// resolves both (topology.go), the publishers must too.
func TestCrossLanguageClusterEndpointType(t *testing.T) {
	langs := languages(t, true)
	c := redistest.StartCluster(t, 3, 0)
	for _, typ := range []string{"unknown-endpoint", "hostname"} {
		for _, s := range c.Nodes() {
			_, err := s.Do(t.Context(), "CONFIG", "SET", "cluster-preferred-endpoint-type", typ)
			require.NoError(t, err)
		}
		got := &collector{}
		b, err := cluster.New(cluster.Config{Addrs: c.Seeds(), Partitions: 64, Options: shardcast.Options{Handler: got.handle}})
		require.NoError(t, err, "Go broker with endpoint type %s", typ)
		for _, lang := range langs {
			t.Run(fmt.Sprintf("%s/%s", typ, lang.name), func(t *testing.T) {
				spec := map[string]any{"engine": "cluster", "addrs": c.Seeds()[:1], "partitions": 64, "prefix": ""}
				publishAndCheck(t, lang, b, got, spec, b.Fingerprint())
			})
		}
		require.NoError(t, b.Close())
	}
}
