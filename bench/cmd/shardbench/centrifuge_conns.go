package main

import (
	"strconv"
	"strings"

	"github.com/shardcast/shardcast/bench/internal/launch"
)

// connKinds counts one server's connections by kind: those holding a
// subscription, those whose last command published or was one of the
// checks a publishing connection also carries (CLUSTER SLOTS, ROLE), and
// the rest (connections idle since their handshake, and this query's own
// connection).
type connKinds struct{ pubsub, publish, other int }

func countConnKinds(addr string) (k connKinds) {
	list, err := launch.Command(addr, "CLIENT", "LIST")
	if err != nil {
		return k
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		switch {
		case !strings.Contains(line, " ssub=0 ") || !strings.Contains(line, " sub=0 "):
			k.pubsub++
		case publishCmd(line):
			k.publish++
		default:
			k.other++
		}
	}
	return k
}

// publishCmd reports whether a CLIENT LIST line's last command published,
// or checked the topology or the node's role: shardcast's publishing
// connections (and rueidis's, inside Centrifuge) carry those between
// publishes.
func publishCmd(line string) bool {
	for _, c := range []string{"spublish", "publish", "evalsha", "eval", "fcall", "cluster|slots", "role"} {
		if strings.Contains(line, " cmd="+c+" ") {
			return true
		}
	}
	return false
}

// masterConns returns connKinds per master.
func masterConns(servers []string) map[string]connKinds {
	out := map[string]connKinds{}
	for _, s := range servers {
		out[s] = countConnKinds(s)
	}
	return out
}

// perMaster renders one count per master, in slot order: "3 / 3 / 3".
func perMaster(m map[string]int, servers []string) string {
	var out []string
	for _, s := range servers {
		out = append(out, strconv.Itoa(m[s]))
	}
	return strings.Join(out, " / ")
}
