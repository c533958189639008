package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// noLeakAfter returns a check, to defer, that fails t if goroutines
// started since the call are still running 10 s later. The wait lets
// goroutines of rueidis v1.0.79 (the client inside Centrifuge's presence
// manager) end: after a closed client's last slot map refresh or a failed
// dial, some sleep for up to 5 s before they return.
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

// TestNodesStopCleanly: two chat nodes on a local cluster, stopped as
// `make chat` stops them at Ctrl-C, leave no goroutine behind.
func TestNodesStopCleanly(t *testing.T) {
	if _, err := os.Stat(clientPath); err != nil {
		t.Skip(err)
	}
	defer noLeakAfter(t)()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addrs, stop, err := startLocalCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nodes, err := startNodes(addrs, 2, "127.0.0.1", 0, clientPath, logger)
	if err != nil {
		t.Fatal(err)
	}
	nodes.stop()
}

// TestNodeFailsCleanly: a node that cannot reach its cluster fails to
// start and leaves nothing running.
func TestNodeFailsCleanly(t *testing.T) {
	if _, err := os.Stat(clientPath); err != nil {
		t.Skip(err)
	}
	defer noLeakAfter(t)()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nodes, err := startNodes([]string{"127.0.0.1:1"}, 1, "127.0.0.1", 0, clientPath, logger)
	t.Logf("startNodes: %v", err)
	if err == nil {
		nodes.stop()
		t.Fatal("started without a cluster")
	}
}
