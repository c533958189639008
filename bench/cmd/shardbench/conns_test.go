package main

import (
	"context"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/launch"
	"github.com/shardcast/shardcast/bench/internal/measure"
)

// TestConnsCountsPublishConnections: the conns column must count the
// connections an engine holds while it runs, publish pools included.
// go-redis grows its pool (10 × GOMAXPROCS) only once publishers run.
func TestConnsCountsPublishConnections(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	set, err := launch.NewSet()
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	addr, err := set.Standalone()
	if err != nil {
		t.Fatal(err)
	}
	saved := cfg
	defer func() { cfg = saved }()
	cfg.channels, cfg.payload = 100, 64
	cfg.warmup, cfg.duration = 100*time.Millisecond, 300*time.Millisecond
	servers := []string{addr}
	base := measure.Clients(servers)

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if n := int64(measure.Clients(servers) - base); n > peak.Load() {
				peak.Store(n)
			}
		}
	})
	k, _ := engines.Lookup("go-redis")
	r := throughputRun(context.Background(), k, engines.Target{Standalone: servers}, servers, 32, reference())
	close(stop)
	wg.Wait()
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	// Right after Subscribe go-redis holds 2 connections (its subscriber
	// and one pooled); the column once stopped there. The pool may still
	// grow after the window ends, while the publishers halt, so the
	// column need not reach the sampled peak.
	t.Logf("conns column %d, sampled peak %d", r.Connections, peak.Load())
	if peak.Load() <= 2 {
		t.Skip("the pool never grew past 2 connections: nothing to judge")
	}
	if r.Connections <= 2 {
		t.Errorf("go-redis, 32 publishers: conns column %d, but it held %d connections during the run", r.Connections, peak.Load())
	}
}
