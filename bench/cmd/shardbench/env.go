package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shardcast/shardcast/bench/internal/launch"
)

// env hands scenarios their Redis: servers given by flags, or local ones
// started on first use and shared by later scenarios of the same process.
type env struct {
	set        *launch.Set
	mu         sync.Mutex
	standalone []string
	clusters   map[int][]string // by number of masters
	given      map[int]bool     // clusters passed by flags are never stopped
	givenSA    bool
}

func newEnv(set *launch.Set, standalone, cluster3, cluster6 []string) *env {
	e := &env{set: set, standalone: standalone, clusters: map[int][]string{}, given: map[int]bool{}, givenSA: len(standalone) > 0}
	if len(cluster3) > 0 {
		e.clusters[3], e.given[3] = cluster3, true
	}
	if len(cluster6) > 0 {
		e.clusters[6], e.given[6] = cluster6, true
	}
	return e
}

// Standalone returns one standalone Redis address.
func (e *env) Standalone() ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.standalone) == 0 {
		progress("starting a standalone redis-server …")
		a, err := e.set.Standalone()
		if err != nil {
			return nil, err
		}
		e.standalone = []string{a}
	}
	return e.standalone, nil
}

// FreshStandalone starts a standalone Redis of its own (unless one was
// given by flag) and a function that stops it.
func (e *env) FreshStandalone() (string, func(), error) {
	if e.givenSA {
		return e.standalone[0], func() {}, nil
	}
	a, err := e.set.Standalone()
	if err != nil {
		return "", nil, err
	}
	return a, func() { e.set.Stop([]string{a}) }, nil
}

// Cluster returns the seed nodes of a cluster with the given number of
// masters (no replicas), starting one if needed.
func (e *env) Cluster(ctx context.Context, masters int) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.clusters[masters]; ok {
		return c, nil
	}
	progress("starting a %d-master Redis Cluster …", masters)
	c, err := e.set.Cluster(ctx, masters)
	if err != nil {
		return nil, err
	}
	e.clusters[masters] = c
	return c, nil
}

// FreshCluster starts a cluster used by one scenario alone (one that kills
// connections), unless one was given by flag.
func (e *env) FreshCluster(ctx context.Context, masters int) ([]string, func(), error) {
	e.mu.Lock()
	if e.given[masters] {
		c := e.clusters[masters]
		e.mu.Unlock()
		return c, func() {}, nil
	}
	e.mu.Unlock()
	progress("starting a fresh %d-master Redis Cluster …", masters)
	c, err := e.set.Cluster(ctx, masters)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { e.set.Stop(c) }, nil
}

// slotRange is one CLUSTER SLOTS entry: [Start, End] owned by Master.
type slotRange struct {
	Start, End int
	Master     string
}

// slotMap reads CLUSTER SLOTS from the first seed that answers.
// clusterMasters returns the shared cluster of m masters: its seeds, its
// slot map and its master addresses.
func (e *env) clusterMasters(ctx context.Context, m int) (seeds []string, sm []slotRange, servers []string, err error) {
	if seeds, err = e.Cluster(ctx, m); err != nil {
		return nil, nil, nil, err
	}
	if sm, err = slotMap(ctx, seeds); err != nil {
		return nil, nil, nil, err
	}
	return seeds, sm, masters(sm), nil
}

func slotMap(ctx context.Context, seeds []string) ([]slotRange, error) {
	var lastErr error
	for _, s := range seeds {
		c := redis.NewClient(&redis.Options{Addr: s})
		slots, err := c.ClusterSlots(ctx).Result()
		_ = c.Close()
		if err != nil {
			lastErr = err
			continue
		}
		var out []slotRange
		for _, r := range slots {
			if len(r.Nodes) > 0 {
				out = append(out, slotRange{Start: r.Start, End: r.End, Master: r.Nodes[0].Addr})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
		return out, nil
	}
	return nil, fmt.Errorf("CLUSTER SLOTS: %w", lastErr)
}

// masters lists the distinct masters of a slot map in slot order.
func masters(m []slotRange) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range m {
		if !seen[r.Master] {
			seen[r.Master] = true
			out = append(out, r.Master)
		}
	}
	return out
}

func ownerOf(m []slotRange, slot int) string {
	for _, r := range m {
		if slot >= r.Start && slot <= r.End {
			return r.Master
		}
	}
	return ""
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// callsOf returns the calls of known, in known's order, that the
// comma-separated list given to flag names; a name not in known, or no
// name at all, is an error.
func callsOf(flag, list string, known []string) ([]string, error) {
	want := splitList(list)
	for _, w := range want {
		if !slices.Contains(known, w) {
			return nil, fmt.Errorf("%s: unknown call %q (have %s)", flag, w, strings.Join(known, ", "))
		}
	}
	var out []string
	for _, op := range known {
		if slices.Contains(want, op) {
			out = append(out, op)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s names no call", flag)
	}
	return out, nil
}
