package main

import (
	"fmt"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

// openBroker builds the broker the flags name: the cluster engine for
// -cluster, the sharded engine for -shards. It returns a description for
// status lines.
func openBroker(t *target, lf *layoutFlags, opts shardcast.Options, getenv func(string) string) (shardcast.Broker, string, error) {
	if err := t.oneEngine(false); err != nil {
		return nil, "", err
	}
	conn, err := t.conn(getenv)
	if err != nil {
		return nil, "", err
	}
	if t.shards != "" {
		b, err := sharded.New(sharded.Config{Addrs: t.instances(), Options: opts, Conn: conn, Agreement: lf.agreement()})
		if err != nil {
			return nil, "", err
		}
		return b, fmt.Sprintf("sharded engine, %d instances, fingerprint %s", len(b.Instances()), b.Fingerprint()), nil
	}
	if _, err := lf.layout(); err != nil {
		return nil, "", err
	}
	b, err := cluster.New(cluster.Config{Addrs: t.seeds(), Partitions: lf.partitions, Prefix: lf.prefix, Options: opts, Conn: conn,
		Agreement: lf.agreement()})
	if err != nil {
		return nil, "", err
	}
	l := b.Layout()
	return b, fmt.Sprintf("cluster engine, %d partitions, prefix %q, fingerprint %s", l.Partitions(), l.Prefix(), b.Fingerprint()), nil
}
