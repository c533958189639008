package main

import (
	"strconv"
	"strings"
	"time"
)

// nodeStats is what one INFO all reply says about a node, as far as
// inspect needs it.
type nodeStats struct {
	// At is the server's clock (server_time_usec); zero when INFO lacks
	// it (Redis before 7.0), and the local clock is used instead.
	At             time.Time
	ClusterEnabled bool
	Role           string // "master" or "slave"
	Clients        int    // connected_clients
	// RecentMaxOutput is client_recent_max_output_buffer: the largest
	// output buffer of any client over the last seconds, in bytes.
	RecentMaxOutput int64
	Channels        int     // pubsub_channels (classic)
	ShardChannels   int     // pubsubshard_channels
	CPU             float64 // used_cpu_sys + used_cpu_user, seconds
	// Calls counts calls per lower-case command name since the server
	// started or CONFIG RESETSTAT: "spublish", "publish", "ssubscribe".
	Calls map[string]int64
	// Replicas are the master's connected replicas (slaveN lines).
	Replicas []replicaLink
	// MasterLink is a replica's master_link_status ("up" or "down").
	MasterLink string
}

// replicaLink is one replica as its master's INFO replication lists it.
type replicaLink struct {
	Addr  string `json:"addr"`
	State string `json:"state"`          // "online", "wait_bgsave", "send_bulk"
	Lag   int64  `json:"lag_seconds"`    // seconds since its last ack
	Link  string `json:"link,omitempty"` // the replica's own master_link_status, when it could be asked
}

// parseInfo reads an INFO reply. Unknown and malformed fields are ignored:
// a field missing from an older or newer Redis reads as zero.
func parseInfo(text string) nodeStats {
	s := nodeStats{Calls: map[string]int64{}}
	var cpuSys, cpuUser float64
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		k, v, ok := strings.Cut(line, ":")
		if !ok || line[0] == '#' {
			continue
		}
		switch {
		case k == "server_time_usec":
			if us, err := strconv.ParseInt(v, 10, 64); err == nil {
				s.At = time.UnixMicro(us)
			}
		case k == "cluster_enabled":
			s.ClusterEnabled = v == "1"
		case k == "role":
			s.Role = v
		case k == "connected_clients":
			s.Clients = atoi(v)
		case k == "client_recent_max_output_buffer":
			s.RecentMaxOutput = int64(atoi(v))
		case k == "pubsub_channels":
			s.Channels = atoi(v)
		case k == "pubsubshard_channels":
			s.ShardChannels = atoi(v)
		case k == "used_cpu_sys":
			cpuSys, _ = strconv.ParseFloat(v, 64)
		case k == "used_cpu_user":
			cpuUser, _ = strconv.ParseFloat(v, 64)
		case k == "master_link_status":
			s.MasterLink = v
		case strings.HasPrefix(k, "cmdstat_"):
			if n, ok := field(v, "calls"); ok {
				s.Calls[k[len("cmdstat_"):]] = int64(atoi(n))
			}
		case strings.HasPrefix(k, "slave") && isDigits(k[len("slave"):]):
			s.Replicas = append(s.Replicas, parseReplicaLine(v))
		}
	}
	s.CPU = cpuSys + cpuUser
	return s
}

// parseReplicaLine reads "ip=127.0.0.1,port=7004,state=online,offset=1,lag=0".
func parseReplicaLine(v string) replicaLink {
	ip, _ := field(v, "ip")
	port, _ := field(v, "port")
	state, _ := field(v, "state")
	lag, _ := field(v, "lag")
	return replicaLink{Addr: joinHostPort(ip, port), State: state, Lag: int64(atoi(lag))}
}

// field returns the value of name in a "k=v,k=v" list.
func field(list, name string) (string, bool) {
	for f := range strings.SplitSeq(list, ",") {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// outputStats sums the output buffers of a node's clients (CLIENT LIST),
// leaving out replicas: a replica's omem is its share of the replication
// backlog, not a slow reader.
type outputStats struct {
	// Subscribers counts clients with a classic or sharded subscription.
	Subscribers int `json:"subscribers"`
	// Backlogged counts clients whose output buffer holds anything.
	Backlogged int `json:"backlogged"`
	// Total and Max are the sum and the largest omem, in bytes.
	Total int64 `json:"total_bytes"`
	Max   int64 `json:"max_bytes"`
}

// parseClientList reads CLIENT LIST: one client a line, space-separated
// key=value fields.
func parseClientList(text string) outputStats {
	var o outputStats
	for line := range strings.Lines(text) {
		var omem int64
		var subscribed, replica bool
		for f := range strings.FieldsSeq(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			switch k {
			case "omem":
				omem = int64(atoi(v))
			case "sub", "ssub", "psub":
				if atoi(v) > 0 {
					subscribed = true
				}
			case "flags":
				replica = strings.ContainsRune(v, 'S')
			}
		}
		if replica {
			continue
		}
		if subscribed {
			o.Subscribers++
		}
		if omem > 0 {
			o.Backlogged++
			o.Total += omem
			o.Max = max(o.Max, omem)
		}
	}
	return o
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	ID   string
	Addr string // host:port, "" when the node does not know it
	// IPAddr is the node's ip:port as CLUSTER NODES gives it, and
	// HostAddr its announced hostname:port ("" without one); Addr is
	// IPAddr unless the slot map names nodes by hostname (see
	// preferSlotMapEndpoints).
	IPAddr, HostAddr string
	Flags            []string
	MasterID         string // "" for a master
	Link             string // the cluster bus link: "connected" or "disconnected"
	HasSlots         bool
}

func (n clusterNode) has(flag string) bool {
	for _, f := range n.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// master reports whether the node acts as a master.
func (n clusterNode) master() bool { return n.has("master") }

// failing reports whether the viewer considers the node failed or
// possibly failed.
func (n clusterNode) failing() bool { return n.has("fail") || n.has("fail?") }

// parseClusterNodes reads CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
// Lines with fewer fields are skipped.
func parseClusterNodes(text string) []clusterNode {
	var out []clusterNode
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{ID: f[0], Flags: strings.Split(f[2], ","), Link: f[7], HasSlots: len(f) > 8}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		addr, hostname, _ := strings.Cut(f[1], ",")
		addr, _, _ = strings.Cut(addr, "@")
		if host, port, ok := cutLast(addr, ":"); ok && host != "" && port != "0" {
			n.Addr = joinHostPort(host, port)
			n.IPAddr = n.Addr
			if hostname != "" {
				n.HostAddr = joinHostPort(hostname, port)
			}
		}
		out = append(out, n)
	}
	return out
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// joinHostPort is net.JoinHostPort for strings that may already be
// bracketed.
func joinHostPort(host, port string) string {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
