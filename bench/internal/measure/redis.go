package measure

import (
	"strconv"
	"strings"
	"time"

	"github.com/shardcast/shardcast/bench/internal/launch"
)

// Info returns the fields of one INFO section of the server at addr.
func Info(addr, section string) (map[string]string, error) {
	out, err := launch.Command(addr, "INFO", section)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// RedisCPU sums used_cpu_sys + used_cpu_user over addrs.
func RedisCPU(addrs []string) time.Duration {
	var total float64
	for _, a := range addrs {
		m, err := Info(a, "cpu")
		if err != nil {
			continue
		}
		s, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
		u, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
		total += s + u
	}
	return time.Duration(total * float64(time.Second))
}

// Clients sums connected_clients over addrs (the querying connection
// included, so compare two readings).
func Clients(addrs []string) int {
	n := 0
	for _, a := range addrs {
		n += IntField(a, "clients", "connected_clients")
	}
	return n
}

// IntField returns one integer INFO field, or 0.
func IntField(addr, section, field string) int {
	m, err := Info(addr, section)
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(m[field])
	return v
}

// CommandCalls returns the calls= count of cmdstat_<cmd> at addr.
func CommandCalls(addr, cmd string) int {
	m, err := Info(addr, "commandstats")
	if err != nil {
		return 0
	}
	v := m["cmdstat_"+cmd]
	for _, kv := range strings.Split(v, ",") {
		if k, n, ok := strings.Cut(kv, "="); ok && k == "calls" {
			c, _ := strconv.Atoi(n)
			return c
		}
	}
	return 0
}

// ClusterStat returns a cluster_stats_* counter from CLUSTER INFO.
func ClusterStat(addr, field string) int {
	out, err := launch.Command(addr, "CLUSTER", "INFO")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
