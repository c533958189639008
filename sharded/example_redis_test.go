package sharded_test

import "github.com/shardcast/shardcast/redistest"

// yourRedisInstances stands for the addresses of your own Redis instances,
// such as []string{"10.0.0.1:6379", "10.0.0.2:6379"}. Here they are two local
// servers the test binary starts the first time an Example asks and stops
// after the last (see TestMain).
func yourRedisInstances() []string { return redistest.OnDemandStandalone(2) }
