package main

import (
	"slices"
	"testing"
)

func TestRedisFromFlags(t *testing.T) {
	for _, tc := range []struct {
		engine, cluster, shards string
		want                    redisConfig
		ok                      bool
	}{
		{"cluster", "", "", redisConfig{Engine: engineCluster}, true},
		{"cluster", "a:7000,b:7000", "", redisConfig{Engine: engineCluster, Addrs: []string{"a:7000", "b:7000"}}, true},
		{"sharded", "", "", redisConfig{Engine: engineSharded}, true},
		{"sharded", "", "a:6379,b:6379", redisConfig{Engine: engineSharded, Addrs: []string{"a:6379", "b:6379"}}, true},
		{"cluster", "", "a:6379", redisConfig{}, false},
		{"sharded", "a:7000", "", redisConfig{}, false},
		{"both", "", "", redisConfig{}, false},
		{"", "", "", redisConfig{}, false},
	} {
		got, err := redisFromFlags(tc.engine, tc.cluster, tc.shards)
		if (err == nil) != tc.ok || got.Engine != tc.want.Engine || !slices.Equal(got.Addrs, tc.want.Addrs) {
			t.Errorf("redisFromFlags(%q, %q, %q) = %+v, %v; want %+v, ok %v", tc.engine, tc.cluster, tc.shards, got, err, tc.want, tc.ok)
		}
	}
}
