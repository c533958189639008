package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

// ErrNotCluster is returned by inspect -cluster and key -cluster for a
// server that has cluster support disabled.
var ErrNotCluster = errors.New("not a Redis Cluster node")

// ErrUnreadNodes is returned after the report when some nodes could not be
// read; the report says which and why.
var ErrUnreadNodes = errors.New("some nodes could not be read")

// ErrUnownedPartitions is returned after the report when some partitions'
// slots have no master: their channels can neither publish nor deliver.
var ErrUnownedPartitions = errors.New("some partitions are on no master")

func runInspect(ctx context.Context, args []string, io stdio) error {
	var (
		t      target
		lf     layoutFlags
		rf     recordFlags
		sample time.Duration
		asJSON bool
	)
	fs := newFlagSet("inspect", "(-cluster host:port | -shards a,b,c) [flags]")
	t.register(fs)
	lf.register(fs)
	rf.register(fs)
	fs.DurationVar(&sample, "sample", time.Second, "how long to sample the command counters and CPU")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	if err := t.check(false); err != nil {
		return usageErr(fs, err)
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "takes no arguments, got %q", fs.Args())
	}
	if sample <= 0 {
		return usageErrorf(fs, "-sample %v: want > 0", sample)
	}
	if err := rf.check(&t); err != nil {
		return usageErr(fs, err)
	}
	if _, err := lf.layout(); err != nil {
		return usageErr(fs, err)
	}
	if t.shards != "" {
		v, err := readShards(ctx, &t, rf, io.getenv, sample)
		if err != nil {
			return err
		}
		r := buildShardsReport(v)
		if err := printShards(io.out, r, asJSON); err != nil {
			return err
		}
		return unreadError(len(r.Instances), func(i int) string { return r.Instances[i].Error })
	}
	v, err := readCluster(ctx, &t, rf.app, io.getenv, sample)
	if err != nil {
		return err
	}
	layout, note, err := clusterLayout(fs, lf, v.Record)
	if err != nil {
		return err
	}
	r := buildClusterReport(layout, v)
	r.LayoutNote = note
	if err := printCluster(io.out, r, asJSON); err != nil {
		return err
	}
	err = unreadError(len(r.Masters), func(i int) string { return r.Masters[i].Error })
	if len(r.Unowned) > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d of %d", ErrUnownedPartitions, len(r.Unowned), r.Partitions))
	}
	return err
}

func unreadError(n int, errOf func(int) string) error {
	bad := 0
	for i := range n {
		if errOf(i) != "" {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d", ErrUnreadNodes, bad, n)
	}
	return nil
}

// connectSeed connects to the first of seeds that answers CLUSTER SLOTS
// and returns the connection, the parsed slot map and the dialer for the
// other nodes.
func connectSeed(ctx context.Context, seeds []string, conn shardcast.ConnOptions) (*nodeConn, shardcast.SlotMap, nodeDialer, error) {
	var errs []error
	for _, seed := range seeds {
		d, err := newDialer(seed, conn)
		if err != nil {
			return nil, shardcast.SlotMap{}, d, err
		}
		c, err := dialNode(ctx, d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reply, err := c.do(ctx, "CLUSTER", "SLOTS")
		if err != nil {
			c.close()
			if strings.Contains(err.Error(), "cluster support disabled") {
				return nil, shardcast.SlotMap{}, d, fmt.Errorf("%s: %w (cluster support is disabled); give standalone instances to -shards", d.Addr, ErrNotCluster)
			}
			errs = append(errs, err)
			continue
		}
		slots, err := cluster.ParseSlots(reply, d.Addr)
		if err != nil {
			c.close()
			errs = append(errs, fmt.Errorf("%s: %w", d.Addr, err))
			continue
		}
		if len(slots.Ranges) == 0 {
			c.close()
			errs = append(errs, fmt.Errorf("%s: the cluster has no slots assigned", d.Addr))
			continue
		}
		return c, slots, d, nil
	}
	return nil, shardcast.SlotMap{}, nodeDialer{}, errors.Join(errs...)
}

// readCluster reads the slot map and node list from a seed, then samples
// every master's counters over the sample window and asks every replica
// for its link state.
func readCluster(ctx context.Context, t *target, app string, getenv func(string) string, window time.Duration) (clusterView, error) {
	conn, err := t.conn(getenv)
	if err != nil {
		return clusterView{}, err
	}
	seed, slots, d, err := connectSeed(ctx, t.seeds(), conn)
	if err != nil {
		return clusterView{}, err
	}
	v := clusterView{Seed: d.Addr, Slots: slots, Masters: map[string]sample{}, ReplicaLinks: map[string]string{}}
	v.Record = readClusterRecord(ctx, t.seeds(), conn, slots, app)
	if text, err := seed.text(ctx, "CLUSTER", "NODES"); err == nil {
		v.Nodes = parseClusterNodes(text)
		v.preferSlotMapEndpoints()
	}
	seed.close()

	masters := clusterMasters(v)
	dialers := make([]nodeDialer, len(masters))
	for i, m := range masters {
		dialers[i] = d.at(m.Addr)
	}
	samples := sampleNodes(ctx, dialers, window)
	if ctx.Err() != nil {
		return clusterView{}, ctx.Err()
	}
	for i, m := range masters {
		v.Masters[m.Addr] = samples[i]
	}
	for _, a := range replicaAddrs(v) {
		v.ReplicaLinks[a] = replicaLinkState(ctx, d, a)
	}
	return v, nil
}

// readClusterRecord reads app's layout record from the master of its slot
// in slots, through the seeds.
func readClusterRecord(ctx context.Context, seeds []string, conn shardcast.ConnOptions, slots shardcast.SlotMap, app string) recordInfo {
	addr, ok := recordNode(slots, app)
	if !ok {
		return recordInfo{App: app, Error: "no master serves the record's slot"}
	}
	st, err := cluster.ReadLayout(ctx, seeds, recordConn(conn), shardcast.Agreement{App: app})
	return recordOf(app, addr, st, err)
}

// replicaAddrs lists every replica the node list or the slot map names.
func replicaAddrs(v clusterView) []string {
	seen := map[string]bool{}
	var out []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, n := range v.Nodes {
		if n.MasterID != "" {
			add(n.Addr)
		}
	}
	for _, rg := range v.Slots.Ranges {
		for _, a := range rg.Replicas {
			add(a)
		}
	}
	return out
}

// replicaLinkState asks a replica for its master_link_status.
func replicaLinkState(ctx context.Context, d nodeDialer, addr string) string {
	c, err := dialNode(ctx, d.at(addr))
	if err != nil {
		return "unreachable"
	}
	defer c.close()
	text, err := c.text(ctx, "INFO", "replication")
	if err != nil {
		return "unreadable"
	}
	return parseInfo(text).MasterLink
}

// sampleNodes reads INFO from every node, waits window, and reads INFO and
// CLIENT LIST again. A node that cannot be read gets an Err in its sample.
func sampleNodes(ctx context.Context, dialers []nodeDialer, window time.Duration) []sample {
	samples := make([]sample, len(dialers))
	conns := make([]*nodeConn, len(dialers))
	started := make([]time.Time, len(dialers))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	for i, d := range dialers {
		c, err := dialNode(ctx, d)
		if err != nil {
			samples[i].Err = err
			continue
		}
		conns[i] = c
		started[i] = time.Now()
		text, err := c.text(ctx, "INFO", "all")
		if err != nil {
			samples[i].Err = err
			continue
		}
		samples[i].Before = parseInfo(text)
	}
	timer := time.NewTimer(window)
	select {
	case <-ctx.Done():
		timer.Stop()
		return samples
	case <-timer.C:
	}
	for i, c := range conns {
		if c == nil || samples[i].Err != nil {
			continue
		}
		text, err := c.text(ctx, "INFO", "all")
		if err != nil {
			samples[i].Err = err
			continue
		}
		samples[i].Elapsed = time.Since(started[i])
		samples[i].After = parseInfo(text)
		if list, err := c.text(ctx, "CLIENT", "LIST"); err == nil {
			samples[i].Output = parseClientList(list)
		}
	}
	return samples
}

// readShards samples every instance of the sharded engine.
func readShards(ctx context.Context, t *target, rf recordFlags, getenv func(string) string, window time.Duration) (shardsView, error) {
	conn, err := t.conn(getenv)
	if err != nil {
		return shardsView{}, err
	}
	var v shardsView
	var dialers []nodeDialer
	for _, a := range t.instances() {
		d, err := newDialer(a, conn)
		if err != nil {
			return shardsView{}, err
		}
		dialers = append(dialers, d)
		v.Addrs = append(v.Addrs, d.Addr)
	}
	// The fingerprint the application's brokers report, computed without
	// connecting, so it shows even when an instance is down.
	if fp, err := sharded.Fingerprint(t.instances()); err == nil {
		v.Fingerprint = fp
	}
	if v.Record, err = rf.readShardsRecord(ctx, t, conn); err != nil {
		return shardsView{}, err
	}
	v.Samples = sampleNodes(ctx, dialers, window)
	if ctx.Err() != nil {
		return shardsView{}, ctx.Err()
	}
	for i, s := range v.Samples {
		if s.Err == nil && s.After.ClusterEnabled {
			return shardsView{}, fmt.Errorf("%s is a Redis Cluster node, where classic Pub/Sub reaches every node; inspect it with -cluster", v.Addrs[i])
		}
	}
	return v, nil
}
