package main

import (
	"strconv"
	"strings"

	"github.com/shardcast/shardcast/bench/internal/launch"
)

// connKinds counts one server's connections by kind: those holding a
// subscription, those whose last command published, and the rest (slot
// map polling, connections idle since their handshake, and this query's
// own connection).
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

// publishCmd reports whether a CLIENT LIST line's last command published.
func publishCmd(line string) bool {
	for _, c := range []string{"spublish", "publish", "evalsha", "eval", "fcall"} {
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
