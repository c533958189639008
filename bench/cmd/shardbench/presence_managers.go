package main

import (
	"fmt"

	"github.com/centrifugal/centrifuge"

	"github.com/shardcast/shardcast/contrib/centrifugebroker"
)

// presNode is one node's presence manager and what closes it.
type presNode struct {
	pm    centrifuge.PresenceManager
	close func()
}

// newPresNode builds one node (see engineNode) and its presence manager
// of the given kind: centAdapter is contrib/centrifugebroker's
// PresenceManager over the node's Broker, centRedis is Centrifuge's
// RedisPresenceManager over its RedisShard. With mapping, every channel
// counts its clients per user too.
func newPresNode(kind string, t callTopo, mapping bool) (*presNode, error) {
	n, err := newEngineNode(kind, t, centrifuge.Config{})
	if err != nil {
		return nil, err
	}
	var userMapping func(string) bool
	if mapping {
		userMapping = func(string) bool { return true }
	}
	var pm centrifuge.PresenceManager
	if kind == centAdapter {
		pm, err = centrifugebroker.NewPresenceManager(n.broker, centrifugebroker.PresenceConfig{UserMapping: userMapping})
	} else {
		pm, err = centrifuge.NewRedisPresenceManager(n.node, centrifuge.RedisPresenceManagerConfig{
			Shards:            []*centrifuge.RedisShard{n.shard},
			EnableUserMapping: userMapping,
		})
	}
	if err != nil {
		n.close()
		return nil, err
	}
	return &presNode{pm: pm, close: n.close}, nil
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
