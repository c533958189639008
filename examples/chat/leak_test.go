package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// noLeakAfter returns a check, to defer, that fails t if goroutines
// started since the call are still running 10 s later. The nodes' own
// goroutines are gone once their Close returned (the check passes at
// once, with no Redis client but shardcast's in the nodes); the wait only
// lets a goroutine that is returning at that moment finish.
func noLeakAfter(t *testing.T) func() {
	before := goleak.IgnoreCurrent()
	return func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := goleak.Find(before)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestNodesStopCleanly: on each engine, two chat nodes, one with a client
// in a room, stopped as `make chat` stops them at Ctrl-C, leave no
// goroutine behind.
func TestNodesStopCleanly(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			defer noLeakAfter(t)()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			redis, stop, err := startLocalRedis(ctx, engine)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			nodes, err := startNodes(redis, 2, "127.0.0.1", 0, stubClient(t), testLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer nodes.stop()
			connectTestClient(t, nodes[0].chat, "alice").subscribe(t, "chat:lobby")
		})
	}
}

// TestNodeFailsCleanly: on each engine, a node that cannot reach its
// Redis fails to start and leaves nothing running.
func TestNodeFailsCleanly(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			defer noLeakAfter(t)()
			redis := redisConfig{Engine: engine, Addrs: []string{"127.0.0.1:1"}}
			nodes, err := startNodes(redis, 1, "127.0.0.1", 0, stubClient(t), testLogger())
			t.Logf("startNodes: %v", err)
			if err == nil {
				nodes.stop()
				t.Fatal("started without Redis")
			}
		})
	}
}
