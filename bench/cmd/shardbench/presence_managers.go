package main

import (
	"context"
	"fmt"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
	"github.com/shardcast/shardcast/sharded"
)

// presTopo is where a presence run's managers keep their entries: one
// standalone Redis, or a 3-master cluster.
type presTopo struct {
	Name    string   // "standalone" or "cluster-3"
	Addrs   []string // the instance, or the cluster's seed nodes
	Servers []string // the masters, in slot order, for CPU and CLIENT LIST
}

func (t presTopo) cluster() bool { return t.Name != "standalone" }

// presNode is one node's presence manager and what closes it.
type presNode struct {
	pm    centrifuge.PresenceManager
	close func()
}

// newPresNode builds one Centrifuge node (not run: nothing but presence
// calls go through it) and its presence manager of the given kind over
// Redis connections of its own, as a node sharing them with its broker
// would hold: centAdapter is contrib/centrifugebroker's PresenceManager
// over a Broker of the cluster engine (128 partitions) or the sharded
// engine (standalone); centRedis is Centrifuge's RedisPresenceManager over
// one RedisShard.
func newPresNode(kind string, t presTopo, mapping bool) (*presNode, error) {
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelNone,
		Metrics:  centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
	})
	if err != nil {
		return nil, err
	}
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	}
	var userMapping func(string) bool
	if mapping {
		userMapping = func(string) bool { return true }
	}
	switch kind {
	case centAdapter:
		var bc centrifugebroker.Config
		if t.cluster() {
			cc := &cluster.Config{Addrs: t.Addrs, Partitions: centPartitions}
			cc.Options.Workers = cfg.scWorkers
			bc.Cluster = cc
		} else {
			sc := &sharded.Config{Addrs: t.Addrs}
			sc.Options.Workers = cfg.scWorkers
			bc.Sharded = sc
		}
		b, err := centrifugebroker.New(node, bc)
		if err != nil {
			shutdown()
			return nil, fmt.Errorf("centrifugebroker: %w", err)
		}
		pm, err := centrifugebroker.NewPresenceManager(b, centrifugebroker.PresenceConfig{UserMapping: userMapping})
		if err != nil {
			_ = b.Close(context.Background())
			shutdown()
			return nil, err
		}
		return &presNode{pm: pm, close: func() { _ = b.Close(context.Background()); shutdown() }}, nil
	case centRedis:
		sc := centrifuge.RedisShardConfig{Address: t.Addrs[0]}
		if t.cluster() {
			sc = centrifuge.RedisShardConfig{ClusterAddresses: t.Addrs}
		}
		shard, err := centrifuge.NewRedisShard(node, sc)
		if err != nil {
			shutdown()
			return nil, fmt.Errorf("centrifuge shard: %w", err)
		}
		pm, err := centrifuge.NewRedisPresenceManager(node, centrifuge.RedisPresenceManagerConfig{
			Shards:            []*centrifuge.RedisShard{shard},
			EnableUserMapping: userMapping,
		})
		if err != nil {
			shard.Close()
			shutdown()
			return nil, err
		}
		return &presNode{pm: pm, close: func() { shard.Close(); shutdown() }}, nil
	}
	shutdown()
	return nil, fmt.Errorf("presence: unknown manager %q (have %s, %s)", kind, centAdapter, centRedis)
}

// presOps are the calls -presence-ops can name, in the order they run.
var presOps = []string{"add", "presence", "stats"}

// presOpsOf returns the calls a -presence-ops list names, in run order.
func presOpsOf(list string) ([]string, error) { return callsOf("-presence-ops", list, presOps) }

// presWorkload is the entries every run keeps in Redis and the calls
// its workers make: clients entries in each of channels channels, client
// k of a channel belonging to user k/2.
type presWorkload struct {
	channels []string
	clients  []string // client IDs, 36 characters as Centrifuge's UUIDs
	infos    []centrifuge.ClientInfo
	users    int
}

func newPresWorkload(prefix string, channels, clients int) *presWorkload {
	w := &presWorkload{channels: channelNames(prefix, channels)}
	users := map[string]bool{}
	for k := range clients {
		id := fmt.Sprintf("%08x-0000-4000-8000-%012x", k, k)
		user := fmt.Sprintf("user%d", k/2)
		users[user] = true
		w.clients = append(w.clients, id)
		w.infos = append(w.infos, centrifuge.ClientInfo{ClientID: id, UserID: user, ConnInfo: []byte(`{"name":"` + user + `"}`)})
	}
	w.users = len(users)
	return w
}

// pair returns the channel and client of call i: every channel once,
// then every channel again with the next client.
func (w *presWorkload) pair(i int) (ch string, k int) {
	return w.channels[i%len(w.channels)], i / len(w.channels) % len(w.clients)
}

// call makes op's call number i on pm. short reports a Presence or
// PresenceStats answer with fewer entries than the workload keeps (an
// entry lost or expired): both managers must do the same work.
func (w *presWorkload) call(pm centrifuge.PresenceManager, op string, i int) (short bool, err error) {
	ch, k := w.pair(i)
	switch op {
	case "add":
		return false, pm.AddPresence(ch, w.clients[k], &w.infos[k])
	case "presence":
		p, err := pm.Presence(ch)
		return err == nil && len(p) != len(w.clients), err
	case "stats":
		s, err := pm.PresenceStats(ch)
		return err == nil && (s.NumClients != len(w.clients) || s.NumUsers != w.users), err
	}
	return false, fmt.Errorf("presence: unknown call %q", op)
}
