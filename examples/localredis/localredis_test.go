package localredis

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestServers: standalone servers and a 3-master, 1-replica-each cluster (redis-cli wants 3 masters) come
// up answering PING, the cluster with its replica linked, and Stop kills
// them all and removes their directory.
func TestServers(t *testing.T) {
	s, err := New("test")
	if err != nil {
		t.Skip(err) // no redis-server on PATH
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	standalone, err := s.Standalone(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := s.Cluster(ctx, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range append(standalone, nodes...) {
		if out, err := cli(ctx, a, "ping"); err != nil || strings.TrimSpace(out) != "PONG" {
			t.Errorf("%s: PING: %q, %v", a, out, err)
		}
	}
	if repl, err := fields(ctx, nodes[3], "info", "replication"); err != nil || repl["role"] != "slave" || repl["master_link_status"] != "up" {
		t.Errorf("replica %s: %v, %v", nodes[3], repl, err)
	}
	s.Stop()
	s.Stop() // idempotent
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", s.dir, err)
	}
	for _, a := range append(standalone, nodes...) {
		if _, err := cli(ctx, a, "ping"); err == nil {
			t.Errorf("%s still answers after Stop", a)
		}
	}
}
