package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
)

// target is where a command reaches Redis: a cluster's seed nodes or the
// sharded engine's instances, and how to log in.
type target struct {
	cluster  string
	shards   string
	user     string
	password string
	// sentinelUser and sentinelPassword log in to the Sentinels of
	// redis+sentinel:// addresses.
	sentinelUser, sentinelPassword string
	tls                            bool
	tlsCA                          string
	timeout                        time.Duration
}

// register adds the address and connection flags to fs.
func (t *target) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cluster, "cluster", "", "Redis Cluster seed node(s), comma-separated host:port or redis[s]:// URLs")
	fs.StringVar(&t.shards, "shards", "", "the sharded engine's instances, comma-separated, in the application's order")
	t.registerConn(fs)
}

// registerConn adds only the connection flags.
func (t *target) registerConn(fs *flag.FlagSet) {
	fs.StringVar(&t.user, "user", "", "ACL user name for host:port addresses")
	fs.StringVar(&t.password, "password", "", "password for host:port addresses (default $REDISCLI_AUTH)")
	fs.StringVar(&t.sentinelUser, "sentinel-user", "", "ACL user name for the Sentinels of redis+sentinel:// addresses")
	fs.StringVar(&t.sentinelPassword, "sentinel-password", "", "password for the Sentinels of redis+sentinel:// addresses (default $SHARDCAST_SENTINEL_PASSWORD)")
	fs.BoolVar(&t.tls, "tls", false, "use TLS for host:port addresses")
	fs.StringVar(&t.tlsCA, "tls-ca", "", "PEM file of the CA that signed the servers' certificates (implies -tls)")
	fs.DurationVar(&t.timeout, "timeout", 5*time.Second, "bound on each connection attempt and command")
}

// seeds returns the -cluster addresses.
func (t *target) seeds() []string { return splitList(t.cluster) }

// instances returns the -shards addresses.
func (t *target) instances() []string { return splitList(t.shards) }

// conn returns the connection settings the flags and environment give.
func (t *target) conn(getenv func(string) string) (shardcast.ConnOptions, error) {
	o := shardcast.ConnOptions{Username: t.user, Password: t.password, DialTimeout: t.timeout}
	if o.Password == "" {
		o.Password = getenv("REDISCLI_AUTH")
	}
	o.SentinelUsername, o.SentinelPassword = t.sentinelUser, cmp.Or(t.sentinelPassword, getenv("SHARDCAST_SENTINEL_PASSWORD"))
	if t.timeout <= 0 {
		return o, fmt.Errorf("-timeout %v: want > 0", t.timeout)
	}
	if t.tls || t.tlsCA != "" {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if t.tlsCA != "" {
		pem, err := os.ReadFile(t.tlsCA)
		if err != nil {
			return o, fmt.Errorf("-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("-tls-ca %s: no PEM certificate in the file", t.tlsCA)
		}
		o.TLS.RootCAs = pool
	}
	return o, nil
}

// check refuses what the flags cannot mean before anything is dialled:
// both engines or (unless noneOK) neither, a -timeout that is not
// positive, an address that does not parse and an instance listed twice.
// Its errors are the command line's, for usageErr.
func (t *target) check(noneOK bool) error {
	if err := t.oneEngine(noneOK); err != nil {
		return err
	}
	if t.timeout <= 0 {
		return fmt.Errorf("-timeout %v: want > 0", t.timeout)
	}
	for _, l := range []struct {
		flag  string
		addrs []string
	}{{"-cluster", t.seeds()}, {"-shards", t.instances()}} {
		if err := shardcast.CheckAddrs(l.flag, l.addrs); err != nil {
			return err
		}
	}
	return nil
}

// oneEngine checks that exactly one of -cluster and -shards is set, unless
// neither is allowed.
func (t *target) oneEngine(noneOK bool) error {
	switch {
	case t.cluster != "" && t.shards != "":
		return errors.New("give -cluster or -shards, not both")
	case t.cluster == "" && t.shards == "" && !noneOK:
		return errors.New("give -cluster host:port or -shards a,b,c")
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// layoutFlags are the cluster engine's layout settings and, for both
// engines, how the broker meets the fleet's layout record.
type layoutFlags struct {
	partitions int
	prefix     string
	app        string
	follow     bool
}

func (l *layoutFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&l.partitions, "partitions", 128, "partition count of the layout (a power of two, 16 to 4096)")
	fs.StringVar(&l.prefix, "prefix", "", "channel prefix of the layout")
}

// registerAgreement adds the flags of the commands that run a broker (pub
// and sub) and so meet the application's layout record.
func (l *layoutFlags) registerAgreement(fs *flag.FlagSet) {
	fs.StringVar(&l.app, "app", "", "Agreement.App of the application whose layout record to meet")
	fs.BoolVar(&l.follow, "follow", false, "adopt the layout the application's running brokers recorded, whatever -partitions, -prefix or -shards say (Agreement.Follow)")
}

// agreement returns the broker's Agreement.
func (l *layoutFlags) agreement() shardcast.Agreement {
	return shardcast.Agreement{App: l.app, Follow: l.follow}
}

func (l *layoutFlags) layout() (*shardcast.Layout, error) {
	return shardcast.NewLayout(l.partitions, l.prefix)
}
