package sharded

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/resp"
)

// checkStandalone refuses an instance that is a Redis Cluster node, with
// an error wrapping shardcast.ErrWrongEngine that names cluster.New:
// classic PUBLISH on a cluster node is relayed to every node of the
// cluster, and SUBSCRIBE on one node hears the whole cluster, which is
// what the cluster engine's sharded Pub/Sub avoids. It asks INFO cluster,
// one short reply at New. A server that refuses the question (a user
// without the permission, INFO renamed away) is not checked: the broker
// then works as before on whatever answers PUBLISH.
func checkStandalone(ctx context.Context, pub *pubconn.Pub, i int) error {
	v, err := pub.DoUncounted(ctx, false, "INFO", "cluster")
	if err != nil {
		if _, refused := resp.IsServerError(err); refused {
			return nil
		}
		return fmt.Errorf("shardcast: connect shard %d (%s): %w", i, pub.Addr(), err)
	}
	info, _ := v.(string)
	if clusterEnabled(info) {
		return fmt.Errorf("%w: shard %d (%s) is a Redis Cluster node (INFO cluster: cluster_enabled:1); "+
			"sharded.New is for standalone instances, use cluster.New for a cluster", shardcast.ErrWrongEngine, i, pub.Addr())
	}
	return nil
}

// clusterEnabled reads cluster_enabled from INFO cluster's reply.
func clusterEnabled(info string) bool {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_enabled:"); ok {
			return v == "1"
		}
	}
	return false
}
