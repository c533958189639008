package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the nodes' concurrent prints.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var finalLine = regexp.MustCompile(`final (\S+)\s+published\s+(\d+)\s+received\s+(\d+)\s+lost (\d+)\s+duplicates (\d+)\s+reordered (\d+).*on (\d+) (?:instances|partitions)`)

// TestFleetRelayout is the fleet demo end to end: three nodes on two
// instances publish and count while the re-layout that `shardcast
// relayout -shards A,B,C -control A` runs (sharded.Relayout, in process)
// moves them to three; every node ends on three instances having lost,
// duplicated and reordered nothing.
func TestFleetRelayout(t *testing.T) {
	a, b, c := redistest.StartStandalone(t), redistest.StartStandalone(t), redistest.StartStandalone(t)
	var out syncBuffer
	cfg := fleetConfig{nodes: 3, name: "n", channels: 200, rate: 1000, heartbeat: 100 * time.Millisecond,
		every: 200 * time.Millisecond, control: a.Addr(), check: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- runNodes(ctx, cfg, []string{a.Addr(), b.Addr()}, &lockedWriter{w: &out}) }()
	waitFor(t, "the nodes to publish", func() bool { return strings.Contains(out.String(), "n3   published") })

	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	rep, err := sharded.Relayout(rctx, sharded.RelayoutConfig{
		ControlAddr: a.Addr(), To: []string{a.Addr(), b.Addr(), c.Addr()},
		Agreement: shardcast.Agreement{Heartbeat: cfg.heartbeat},
	})
	require.NoError(t, err)
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %v", p.Phase, p.Took.Round(time.Millisecond))
	}
	mark := len(out.String())
	waitFor(t, "a report after the re-layout", func() bool { return strings.Contains(out.String()[mark:], "n3   published") })
	cancel()
	require.NoError(t, <-errc)
	t.Log("\n" + out.String())
	finals := finalLine.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, finals, 3)
	for _, f := range finals {
		assert.NotZero(t, atoi(f[2]), "%s published", f[1])
		assert.NotZero(t, atoi(f[3]), "%s received", f[1])
		assert.Equal(t, "0 0 0", f[4]+" "+f[5]+" "+f[6], "%s lost, duplicates, reordered", f[1])
		assert.Equal(t, "3", f[7], "%s instances", f[1])
	}
	for _, phase := range []string{"prepare", "switch", "drain", "finish"} {
		assert.Contains(t, out.String(), "n1: re-layout "+phase)
	}
}

// TestFleetRelayoutCluster is the same on a Redis Cluster: three nodes on
// 128 partitions publish and count while the re-layout that `shardcast
// relayout -cluster SEEDS -partitions 1024` runs (cluster.Relayout, in
// process) moves them to 1024; every node ends on 1024 partitions having
// lost, duplicated and reordered nothing.
func TestFleetRelayoutCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	var out syncBuffer
	cfg := fleetConfig{engine: "cluster", cluster: strings.Join(c.Seeds(), ","), partitions: 128, nodes: 3, name: "n",
		channels: 200, rate: 1000, heartbeat: 100 * time.Millisecond, every: 200 * time.Millisecond, check: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- runNodes(ctx, cfg, nil, &lockedWriter{w: &out}) }()
	waitFor(t, "the nodes to publish", func() bool { return strings.Contains(out.String(), "n3   published") })

	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	rep, err := cluster.Relayout(rctx, cluster.RelayoutConfig{Addrs: c.Seeds(), Partitions: 1024,
		Agreement: shardcast.Agreement{Heartbeat: cfg.heartbeat}})
	require.NoError(t, err)
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %v", p.Phase, p.Took.Round(time.Millisecond))
	}
	mark := len(out.String())
	waitFor(t, "a report after the re-layout", func() bool { return strings.Contains(out.String()[mark:], "n3   published") })
	cancel()
	require.NoError(t, <-errc)
	t.Log("\n" + out.String())
	finals := finalLine.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, finals, 3)
	for _, f := range finals {
		assert.NotZero(t, atoi(f[2]), "%s published", f[1])
		assert.NotZero(t, atoi(f[3]), "%s received", f[1])
		assert.Equal(t, "0 0 0", f[4]+" "+f[5]+" "+f[6], "%s lost, duplicates, reordered", f[1])
		assert.Equal(t, "1024", f[7], "%s partitions", f[1])
	}
	for _, phase := range []string{"prepare", "switch", "drain", "finish"} {
		assert.Contains(t, out.String(), "n1: re-layout "+phase)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
