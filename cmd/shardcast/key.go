package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

func runKey(ctx context.Context, args []string, io stdio) error {
	var (
		t      target
		lf     layoutFlags
		rf     recordFlags
		asJSON bool
	)
	fs := newFlagSet("key", "[-partitions N] [-prefix p] [-cluster host:port | -shards a,b,c] [-app name] CHANNEL...")
	t.register(fs)
	lf.register(fs)
	rf.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	if err := t.check(true); err != nil {
		return usageErr(fs, err)
	}
	channels := fs.Args()
	if len(channels) == 0 {
		return usageErrorf(fs, "give at least one CHANNEL")
	}
	for _, ch := range channels {
		if err := shardcast.ValidateChannel(ch); err != nil {
			return usageErr(fs, err)
		}
	}
	if err := rf.check(&t); err != nil {
		return usageErr(fs, err)
	}
	if _, err := lf.layout(); err != nil {
		return usageErr(fs, err)
	}
	if t.shards != "" {
		conn, err := t.conn(io.getenv)
		if err != nil {
			return err
		}
		var addrs []string
		for _, a := range t.instances() {
			e, err := shardcast.ParseAddr(a, conn)
			if err != nil {
				return err
			}
			addrs = append(addrs, e.Addr)
		}
		rec, err := rf.readShardsRecord(ctx, &t, conn)
		if err != nil {
			return err
		}
		// The instances as given decide; the record, when it differs,
		// is worth a warning (on stderr: stdout stays the table or JSON).
		fmt.Fprintln(io.err, shardsNote(addrs, rec))
		rows := shardKeys(channels, addrs)
		if asJSON {
			return printJSON(io.out, rows)
		}
		tw := tabwriter.NewWriter(io.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CHANNEL\tINSTANCE\tADDRESS")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Channel, r.Instance, r.Addr)
		}
		return tw.Flush()
	}

	layout, err := lf.layout()
	if err != nil {
		return err
	}
	var slots *shardcast.SlotMap
	if t.cluster != "" {
		conn, err := t.conn(io.getenv)
		if err != nil {
			return err
		}
		c, m, _, err := connectSeed(ctx, t.seeds(), conn)
		if err != nil {
			return err
		}
		c.close()
		slots = &m
		var note string
		layout, note, err = clusterLayout(fs, lf, readClusterRecord(ctx, t.seeds(), conn, m, rf.app))
		if err != nil {
			return err
		}
		fmt.Fprintln(io.err, note)
	}
	rows := clusterKeys(layout, channels, slots)
	if asJSON {
		return printJSON(io.out, rows)
	}
	tw := tabwriter.NewWriter(io.out, 0, 0, 2, ' ', 0)
	header := "CHANNEL\tPARTITION\tTAG\tSLOT\tKEY"
	if slots != nil {
		header += "\tMASTER"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s", r.Channel, r.Partition, r.Tag, r.Slot, r.Key)
		if slots != nil {
			master := r.Master
			if master == "" {
				master = "none (slot unassigned)"
			}
			fmt.Fprintf(tw, "\t%s", master)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// clusterKey is where the cluster engine puts one channel.
type clusterKey struct {
	Channel   string `json:"channel"`
	Partition int    `json:"partition"`
	Tag       string `json:"tag"`
	Slot      uint16 `json:"slot"`
	Key       string `json:"key"`
	Master    string `json:"master,omitempty"`
}

// clusterKeys places channels under layout l; with a slot map it also
// names each one's master.
func clusterKeys(l *shardcast.Layout, channels []string, slots *shardcast.SlotMap) []clusterKey {
	out := make([]clusterKey, len(channels))
	for i, ch := range channels {
		p := l.Partition(ch)
		k := clusterKey{Channel: ch, Partition: p, Tag: l.Tag(p), Slot: l.Slot(p), Key: l.PartitionKey(p, ch)}
		if slots != nil {
			k.Master, _ = slots.MasterOf(k.Slot)
		}
		out[i] = k
	}
	return out
}

// shardKey is where the sharded engine puts one channel; the wire name is
// the channel itself.
type shardKey struct {
	Channel  string `json:"channel"`
	Instance int    `json:"instance"`
	Addr     string `json:"addr"`
}

// shardKeys places channels on the instances addrs, listed in the
// application's order: jump(xxhash64(channel), len(addrs)).
func shardKeys(channels, addrs []string) []shardKey {
	out := make([]shardKey, len(channels))
	for i, ch := range channels {
		n := sharded.InstanceOf(ch, len(addrs))
		out[i] = shardKey{Channel: ch, Instance: n, Addr: addrs[n]}
	}
	return out
}
