package cluster_test

import "github.com/shardcast/shardcast/redistest"

// yourClusterSeeds stands for the addresses of a few nodes of your own Redis
// Cluster, such as []string{"10.0.0.1:7000", "10.0.0.2:7000"}; the broker
// discovers the rest. Here they are the nodes of a local 3-master,
// 1-replica-each cluster the test binary starts the first time an Example
// asks and stops after the last (see TestMain).
func yourClusterSeeds() []string { return redistest.OnDemandCluster() }
