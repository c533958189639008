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
	"github.com/shardcast/shardcast/redistest"
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
// moves them to three; a node started afterwards on the two instances
// with -follow adopts the three; every node ends on three instances
// having lost, duplicated and reordered nothing.
func TestFleetRelayout(t *testing.T) {
	a, b, c := redistest.StartStandalone(t), redistest.StartStandalone(t), redistest.StartStandalone(t)
	cfg := fleetConfig{nodes: 3, name: "n", channels: 200, rate: 1000, heartbeat: 100 * time.Millisecond,
		every: 200 * time.Millisecond, control: a.Addr(), check: true}
	testFleetRelayout(t, cfg, []string{a.Addr(), b.Addr()}, "3", func(ctx context.Context) error {
		rep, err := sharded.Relayout(ctx, sharded.RelayoutConfig{
			ControlAddr: a.Addr(), To: []string{a.Addr(), b.Addr(), c.Addr()},
			Agreement: shardcast.Agreement{Heartbeat: cfg.heartbeat},
		})
		logPhases(t, rep)
		return err
	})
}

// TestFleetRelayoutCluster is the same on a Redis Cluster: three nodes on
// 128 partitions publish and count while the re-layout that `shardcast
// relayout -cluster SEEDS -partitions 1024` runs (cluster.Relayout, in
// process) moves them to 1024; a node started afterwards with
// -partitions 128 and -follow adopts 1024; every node ends on 1024
// partitions having lost, duplicated and reordered nothing.
func TestFleetRelayoutCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	cfg := fleetConfig{engine: "cluster", cluster: strings.Join(c.Seeds(), ","), partitions: 128, nodes: 3, name: "n",
		channels: 200, rate: 1000, heartbeat: 100 * time.Millisecond, every: 200 * time.Millisecond, check: true}
	testFleetRelayout(t, cfg, nil, "1024", func(ctx context.Context) error {
		rep, err := cluster.Relayout(ctx, cluster.RelayoutConfig{Addrs: c.Seeds(), Partitions: 1024,
			Agreement: shardcast.Agreement{Heartbeat: cfg.heartbeat}})
		logPhases(t, rep)
		return err
	})
}

// testFleetRelayout runs cfg's nodes on shards (nil for a cluster), moves
// them with relayout while they publish, then starts node "late1" with
// the same configuration plus -follow, and checks that all four end on
// want instances or partitions having lost, duplicated and reordered
// nothing, and that the first nodes reported every phase.
func testFleetRelayout(t *testing.T, cfg fleetConfig, shards []string, want string, relayout func(context.Context) error) {
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- runNodes(ctx, cfg, shards, &lockedWriter{w: &out}) }()
	waitFor(t, "the nodes to publish", func() bool { return strings.Contains(out.String(), "n3   published") })

	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	require.NoError(t, relayout(rctx))
	late := cfg
	late.nodes, late.name, late.follow = 1, "late", true
	go func() { errc <- runNodes(ctx, late, shards, &lockedWriter{w: &out}) }()
	mark := len(out.String())
	waitFor(t, "a report of every node after the re-layout", func() bool {
		after := out.String()[mark:]
		return strings.Contains(after, "n3   published") && strings.Contains(after, "late1 published")
	})
	cancel()
	require.NoError(t, <-errc)
	require.NoError(t, <-errc)
	t.Log("\n" + out.String())
	finals := finalLine.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, finals, 4)
	for _, f := range finals {
		assert.NotZero(t, atoi(f[2]), "%s published", f[1])
		assert.NotZero(t, atoi(f[3]), "%s received", f[1])
		assert.Equal(t, "0 0 0", f[4]+" "+f[5]+" "+f[6], "%s lost, duplicates, reordered", f[1])
		assert.Equal(t, want, f[7], "%s's layout", f[1])
	}
	for _, phase := range []string{"prepare", "switch", "drain", "finish"} {
		assert.Contains(t, out.String(), "n1: re-layout "+phase)
	}
}

// logPhases logs a re-layout's phases.
func logPhases(t *testing.T, rep shardcast.RelayoutReport) {
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %v", p.Phase, p.Took.Round(time.Millisecond))
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
