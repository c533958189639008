package shardcast_test

import "github.com/shardcast/shardcast/redistest"

// yourRedisInstances stands for the addresses of your own standalone Redis
// instances, such as []string{"10.0.0.1:6379", "10.0.0.2:6379"}. Here they
// are local servers the test binary starts the first time an Example asks
// and stops after the last (see TestMain).
func yourRedisInstances() []string { return redistest.OnDemandStandalone(2) }

// yourClusterSeeds stands for a few nodes of your own Redis Cluster, such as
// []string{"10.0.0.1:7000"}. Here they are the nodes of a local 3-master,
// 1-replica-each cluster started the same way.
func yourClusterSeeds() []string { return redistest.OnDemandCluster() }
