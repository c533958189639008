package redisaddr

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/shardcast/shardcast/internal/badconfig"
	"github.com/shardcast/shardcast/internal/subconn"
)

// SentinelPrefix starts the identity of a master reached through Sentinel
// ("sentinel/mymaster"): it stands for the shard in fingerprints and
// layout records, so that a failover changes nothing there. No host:port
// holds a slash, so no instance address can be mistaken for one.
const SentinelPrefix = "sentinel/"

// defaultSentinelPort is Sentinel's usual port, taken when an address of a
// Sentinel names none.
const defaultSentinelPort = "26379"

// Target is one configured address: a node, or a master that Sentinels
// name.
type Target struct {
	// ID names the shard: the node's host:port, or SentinelPrefix and the
	// master's name.
	ID string
	// Dialer reaches the node. For a master found through Sentinel its
	// Addr is empty (the engine sets the address Sentinel gives); it
	// carries the data nodes' credentials and TLS.
	Dialer subconn.Dialer
	// Sentinels holds the Sentinels' host:port and Master the name they
	// know the master by; both are empty for a node.
	Sentinels []string
	Master    string
	// SentinelDialer reaches the Sentinels (its Addr is empty): the
	// timeout, credentials and TLS of ConnOptions' Sentinel fields.
	SentinelDialer subconn.Dialer
}

// Parse is ParseAddr that also takes a master reached through Sentinel:
// redis+sentinel://[user[:password]@]host[:port][,host[:port]…]/name
// (rediss+sentinel:// for TLS to the data nodes; valkey+sentinel:// and
// valkeys+sentinel:// are the same). The credentials and TLS are the data
// nodes'; the Sentinels are reached with o's SentinelUsername,
// SentinelPassword and SentinelTLS. A Sentinel's port defaults to 26379.
func Parse(addr string, o Login) (Target, error) {
	if !IsSentinel(addr) {
		d, err := ParseAddr(addr, o)
		return Target{ID: d.Addr, Dialer: d}, err
	}
	scheme, rest, _ := strings.Cut(addr, "://")
	scheme = strings.ToLower(scheme) // as net/url takes a scheme
	t := Target{Dialer: subconn.Dialer{Timeout: o.DialTimeout, Username: o.Username, Password: o.Password, TLS: o.TLS}}
	switch scheme {
	case "redis+sentinel", "valkey+sentinel":
		t.Dialer.TLS = nil
	case "rediss+sentinel", "valkeys+sentinel":
		t.Dialer.TLS = &tls.Config{}
		if o.TLS != nil {
			t.Dialer.TLS = o.TLS.Clone()
		}
	default:
		return t, fmt.Errorf("%w: address %q: scheme %q, want redis+sentinel:// or rediss+sentinel://", badconfig.Err, Redact(addr), scheme)
	}
	hosts, name, ok := strings.Cut(rest, "/")
	if !ok || name == "" || strings.ContainsAny(name, "/?# \t\r\n") {
		return t, fmt.Errorf("%w: address %q: want a master name after the Sentinels, as in redis+sentinel://host:26379/mymaster", badconfig.Err, Redact(addr))
	}
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		u, err := url.Parse("redis://" + hosts[:at+1] + "x")
		if err != nil || u.User == nil {
			return t, fmt.Errorf("%w: address %q: bad user or password", badconfig.Err, Redact(addr))
		}
		t.Dialer.Username = u.User.Username()
		t.Dialer.Password, _ = u.User.Password()
		hosts = hosts[at+1:]
	}
	for _, h := range strings.Split(hosts, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultSentinelPort)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return t, fmt.Errorf("%w: address %q: Sentinel %q is not host:port", badconfig.Err, Redact(addr), h)
		}
		if err := checkPlain(h, host, port); err != nil {
			return t, fmt.Errorf("%w (in %q)", err, Redact(addr))
		}
		t.Sentinels = append(t.Sentinels, h)
	}
	if err := Distinct("the Sentinels of "+Redact(addr), t.Sentinels); err != nil {
		return t, err
	}
	t.Master, t.ID = name, SentinelPrefix+name
	t.SentinelDialer = subconn.Dialer{Timeout: o.DialTimeout, Username: o.SentinelUsername, Password: o.SentinelPassword, TLS: o.SentinelTLS}
	return t, nil
}

// IsSentinel reports whether addr is written as a master reached through
// Sentinel (a scheme ending in "+sentinel", in any case), well formed or
// not.
func IsSentinel(addr string) bool {
	scheme, _, ok := strings.Cut(addr, "://")
	return ok && strings.HasSuffix(strings.ToLower(scheme), "+sentinel")
}

// SentinelURL writes the address of shard id ("sentinel/name") reached
// through sentinels, as Parse reads it: for a broker that learns a
// Sentinel shard from the layout record, where no URL or credential is
// kept. tls asks for rediss+sentinel:// (TLS to the data nodes); user,
// if not nil, gives the data nodes' credentials.
func SentinelURL(id string, sentinels []string, tls bool, user *url.Userinfo) string {
	scheme := "redis+sentinel"
	if tls {
		scheme = "rediss+sentinel"
	}
	auth := ""
	if user != nil {
		auth = user.String() + "@"
	}
	return scheme + "://" + auth + strings.Join(sentinels, ",") + "/" + strings.TrimPrefix(id, SentinelPrefix)
}
