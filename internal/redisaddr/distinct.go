package redisaddr

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/shardcast/shardcast/internal/badconfig"
)

// Distinct returns ErrInvalidConfig, naming both entries, when two of
// addrs reach the same instance (or name one Sentinel master), or the
// first Parse error. field names
// the list in the message ("sharded.Config.Addrs"). Two entries are the
// same instance when their host and port are, however each is written: as
// host:port or as a URL (with or without credentials, database or the
// default port), a host name in any case, an IP address in any of its
// spellings (::1 and 0:0:0:0:0:0:0:1; ::ffff:10.0.0.1 and 10.0.0.1).
// Names that only DNS could equate (localhost and 127.0.0.1) stay
// distinct: deciding that here would make the answer depend on the
// resolver of the moment.
func Distinct(field string, addrs []string) error {
	seen := make(map[string]int, len(addrs))
	for i, a := range addrs {
		t, err := Parse(a, Login{})
		if err != nil {
			return err
		}
		k := instanceKey(t.ID)
		if j, ok := seen[k]; ok {
			return fmt.Errorf("%w: %s lists the instance %s twice (entries %d and %d: %q and %q); list each instance once",
				badconfig.Err, field, t.ID, j, i, Redact(addrs[j]), Redact(a))
		}
		seen[k] = i
	}
	return nil
}

// instanceKey is the form of a normalised host:port that equal instances
// share: the host lower-cased, or an IP address in its canonical text, and
// the port as a number.
func instanceKey(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	} else {
		host = strings.ToLower(host)
	}
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	}
	return net.JoinHostPort(host, port)
}
