package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

// This file reads the layout record of the application's running brokers
// (shardcast.Agreement) for inspect and key, so that they show the layout
// the fleet routes by rather than the flags' defaults.

// recordFlags says where the layout record is.
type recordFlags struct {
	app     string
	control string
}

func (r *recordFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.app, "app", "", "Agreement.App of the application whose layout record to read")
	fs.StringVar(&r.control, "control", "", "sharded: the instance that holds the layout record (default: the first of -shards, as sharded.Config.ControlAddr)")
}

// check refuses an -app the brokers could not have used, and -control
// without -shards.
func (r recordFlags) check(t *target) error {
	if err := (shardcast.Agreement{App: r.app}).Validate(); err != nil {
		return fmt.Errorf("-app: %w", err)
	}
	if r.control != "" && t.shards == "" {
		return errors.New("-control is for -shards: a cluster's layout record is on the master of its slot")
	}
	if r.control != "" {
		if _, err := shardcast.ParseAddr(r.control, shardcast.ConnOptions{}); err != nil {
			return fmt.Errorf("-control: %w", err)
		}
	}
	return nil
}

// readShardsRecord reads a sharded application's record from the
// instance that holds it: -control, or the first of -shards.
func (r recordFlags) readShardsRecord(ctx context.Context, t *target, conn shardcast.ConnOptions) (recordInfo, error) {
	control := r.control
	if control == "" {
		list := t.instances()
		if len(list) == 0 {
			return recordInfo{}, errors.New("-shards lists no instance")
		}
		control = list[0]
	}
	e, err := shardcast.ParseAddr(control, conn)
	if err != nil {
		return recordInfo{}, err
	}
	st, err := sharded.ReadLayout(ctx, control, recordConn(conn), shardcast.Agreement{App: r.app})
	return recordOf(r.app, e.Addr, st, err), nil
}

// recordConn is conn for reading the layout record: -timeout, which
// conn holds as its DialTimeout, bounds each read too, as it bounds
// every other command of inspect and key.
func recordConn(conn shardcast.ConnOptions) shardcast.ConnOptions {
	conn.CommandTimeout = conn.DialTimeout
	return conn
}

// recordInfo is what was found of the layout record.
type recordInfo struct {
	App string `json:"app"`
	// Where is the node that holds the record.
	Where string `json:"where"`
	// Found is false when the application has no record there (its
	// brokers run with Agreement.Off, under another App, or none ran).
	Found       bool     `json:"found"`
	Fingerprint string   `json:"fingerprint,omitempty"`
	Description string   `json:"description,omitempty"`
	Engine      string   `json:"engine,omitempty"`
	Partitions  int      `json:"partitions,omitempty"`
	Prefix      string   `json:"prefix,omitempty"`
	Instances   []string `json:"instances,omitempty"`
	// LiveBrokers counts the brokers registered under the record.
	LiveBrokers int `json:"live_brokers"`
	// Relayout describes a re-layout under way ("" when none).
	Relayout string `json:"relayout,omitempty"`
	// Error says why the record could not be read.
	Error string `json:"error,omitempty"`
}

// recordOf is what inspect and key show of app's layout record, read
// (st, or err) on where, the node that holds it. A failure is reported
// in the result, not returned: the record only adds to what they show.
func recordOf(app, where string, st shardcast.LayoutStatus, err error) recordInfo {
	info := recordInfo{App: app, Where: where}
	if err != nil {
		info.Error = err.Error()
		return info
	}
	info.LiveBrokers = len(st.Brokers)
	if t := st.Relayout; t != nil {
		info.Relayout = fmt.Sprintf("%s in phase %s, to %s", t.ID, t.Phase, t.To.Description)
	}
	if r := st.Record; r != nil {
		info.Found = true
		info.Fingerprint, info.Description, info.Engine = r.Fingerprint, r.Description, r.Engine
		info.Partitions, info.Prefix, info.Instances = r.Partitions, r.Prefix, r.Instances
	}
	return info
}

// recordNode returns the master that holds app's record in a cluster.
func recordNode(slots shardcast.SlotMap, app string) (string, bool) {
	return slots.MasterOf(cluster.KeySlot(shardcast.Agreement{App: app}.RecordKey()))
}

// clusterLayout returns the layout inspect and key use on a cluster: the
// record's when the record is the cluster engine's and neither -partitions
// nor -prefix was given, else the flags'. The note says which, and warns
// when the flags' layout is not the one the running brokers recorded.
func clusterLayout(fs *flag.FlagSet, lf layoutFlags, rec recordInfo) (*shardcast.Layout, string, error) {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "partitions" || f.Name == "prefix" })
	switch {
	case rec.Error != "":
		l, err := lf.layout()
		return l, fmt.Sprintf("warning: layout record of %s unreadable (%s); layout from the flags", appLabel(rec.App), rec.Error), err
	case !rec.Found:
		l, err := lf.layout()
		return l, fmt.Sprintf("no layout record for %s on %s; layout from the flags", appLabel(rec.App), rec.Where), err
	case rec.Engine != "cluster":
		l, err := lf.layout()
		return l, fmt.Sprintf("warning: the layout record of %s is the %s engine's (%s); layout from the flags", appLabel(rec.App), rec.Engine, rec.Description), err
	case !set:
		l, err := shardcast.NewLayout(rec.Partitions, rec.Prefix)
		if err != nil {
			return nil, "", fmt.Errorf("the layout record of %s on %s: %w", appLabel(rec.App), rec.Where, err)
		}
		return l, fmt.Sprintf("layout from the record of %s; %d live broker(s)%s", appLabel(rec.App), rec.LiveBrokers, relayoutNote(rec)), nil
	}
	l, err := lf.layout()
	if err != nil {
		return nil, "", err
	}
	if l.Fingerprint() != rec.Fingerprint {
		return l, fmt.Sprintf("warning: layout from the flags, but the running brokers of %s recorded another: %s (fingerprint %s)%s",
			appLabel(rec.App), rec.Description, rec.Fingerprint, relayoutNote(rec)), nil
	}
	return l, fmt.Sprintf("layout from the flags, the one recorded for %s; %d live broker(s)%s", appLabel(rec.App), rec.LiveBrokers, relayoutNote(rec)), nil
}

// shardsNote compares the -shards list with the record's instance list.
func shardsNote(addrs []string, rec recordInfo) string {
	switch {
	case rec.Error != "":
		return fmt.Sprintf("warning: layout record of %s unreadable (%s)", appLabel(rec.App), rec.Error)
	case !rec.Found:
		return fmt.Sprintf("no layout record for %s on %s", appLabel(rec.App), rec.Where)
	case rec.Engine != "sharded":
		return fmt.Sprintf("warning: the layout record of %s is the %s engine's (%s)", appLabel(rec.App), rec.Engine, rec.Description)
	case !slices.Equal(addrs, rec.Instances):
		return fmt.Sprintf("warning: the running brokers of %s recorded another instance list, in routing order: %s%s",
			appLabel(rec.App), strings.Join(rec.Instances, ","), relayoutNote(rec))
	}
	return fmt.Sprintf("instance list as recorded for %s; %d live broker(s)%s", appLabel(rec.App), rec.LiveBrokers, relayoutNote(rec))
}

func relayoutNote(rec recordInfo) string {
	if rec.Relayout == "" {
		return ""
	}
	return "; re-layout under way: " + rec.Relayout
}

// appLabel names an application in notes.
func appLabel(app string) string {
	if app == "" {
		return "the default app (no -app)"
	}
	return fmt.Sprintf("app %q", app)
}
