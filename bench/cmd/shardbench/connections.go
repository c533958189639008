package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/launch"
)

type connResult struct {
	Scenario   string         `json:"scenario"`
	Engine     string         `json:"engine"`
	Masters    int            `json:"masters"`
	Brokers    int            `json:"brokers"`
	Partitions int            `json:"partitions"`
	SubConns   map[string]int `json:"subscribe_connections_per_master"`
	AllConns   map[string]int `json:"connections_per_master"`
	Error      string         `json:"error,omitempty"`
}

// runConnections counts the connections B broker instances hold on each
// master while subscribed to channels of every partition.
func runConnections(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "connections", Title: "Connections per master"}
	var rows [][]string
	var scOK *bool
	var got []string
	for _, m := range []int{3, 6} {
		seeds, _, servers, err := e.clusterMasters(ctx, m)
		if err != nil {
			return sec, err
		}
		for _, name := range engineList([]string{"shardcast-cluster", "centrifuge-sharded", "centrifuge-sharded-tags", "go-redis-cluster"}) {
			k, err := engines.Lookup(name)
			if err != nil {
				return sec, err
			}
			if !k.Cluster {
				continue
			}
			progress("connections: %s, %d brokers × %d masters …", name, cfg.brokers, m)
			r := connRun(ctx, k, seeds, servers)
			r.Scenario, r.Engine, r.Masters, r.Brokers, r.Partitions = "connections", name, m, cfg.brokers, 128
			emit(r)
			if r.Error != "" {
				rows = append(rows, []string{name, strconv.Itoa(m), "error: " + r.Error})
				continue
			}
			var sub, all []string
			subTotal, allTotal := 0, 0
			for _, s := range servers {
				sub = append(sub, strconv.Itoa(r.SubConns[s]))
				all = append(all, strconv.Itoa(r.AllConns[s]))
				subTotal += r.SubConns[s]
				allTotal += r.AllConns[s]
			}
			rows = append(rows, []string{name, strconv.Itoa(m), strconv.Itoa(cfg.brokers), strings.Join(sub, " / "), strings.Join(all, " / "),
				strconv.Itoa(subTotal), strconv.Itoa(allTotal), fmt.Sprintf("%.1f", float64(subTotal)/float64(cfg.brokers*m))})
			if name == "shardcast-cluster" {
				ok := scOK == nil || *scOK
				for _, s := range servers {
					if r.SubConns[s] != cfg.brokers {
						ok = false
					}
				}
				scOK = &ok
				got = append(got, fmt.Sprintf("%d masters: %s subscribe conns per master for %d brokers", m, strings.Join(sub, "/"), cfg.brokers))
			}
		}
	}
	head := []string{"engine", "masters", "brokers", "subscribe conns per master", "all conns per master", "subscribe conns total", "all conns total", "subscribe conns per broker per master"}
	tbl := table(head, rows)
	show("connections\n" + tbl)
	sec.Body = fmt.Sprintf("%d broker instances of one engine in one process, each subscribed to 2,000 channels (every partition), 128 partitions, "+
		"clusters without replicas. Counted from CLIENT LIST on every master: *subscribe conns* hold at least one SSUBSCRIBE (ssub>0); "+
		"*all conns* is every connection the brokers opened (publish pools included), i.e. CLIENT LIST lines minus those before the brokers started.\n\n%s\n",
		cfg.brokers, tbl)
	if scOK != nil {
		sec.Targets = append(sec.Targets, target{"connections: one subscribe connection per master per broker", strings.Join(got, "; "), metStr(*scOK)})
	}
	return sec, nil
}

// clientCounts returns, for one server, the number of connections and
// how many of them hold sharded or classic subscriptions.
func clientCounts(addr string) (all, sub int) {
	list, err := launch.Command(addr, "CLIENT", "LIST")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		all++
		if !strings.Contains(line, " ssub=0 ") || !strings.Contains(line, " sub=0 ") {
			sub++
		}
	}
	return all, sub
}

func connRun(ctx context.Context, k engines.Kind, seeds, servers []string) (res connResult) {
	base := map[string]int{}
	for _, s := range servers {
		base[s], _ = clientCounts(s)
	}
	var engs []engines.Engine
	defer func() {
		for _, e := range engs {
			_ = e.Close()
		}
		deadline := time.Now().Add(5 * time.Second)
		for _, s := range servers {
			for {
				n, _ := clientCounts(s)
				if n <= base[s] || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	names := channelNames("conn:"+k.Name+":", 2000)
	for range cfg.brokers {
		eng, err := k.New(engines.Target{Cluster: seeds}, tuning(), func(string, []byte, time.Time) {})
		if err != nil {
			res.Error = err.Error()
			return res
		}
		engs = append(engs, eng)
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = eng.Subscribe(sctx, names)
		cancel()
		if err != nil {
			res.Error = "subscribe: " + err.Error()
			return res
		}
		// One publish per engine so lazily opened publish connections count too.
		_ = eng.Publish(ctx, names[0], make([]byte, 16))
	}
	res.SubConns, res.AllConns = map[string]int{}, map[string]int{}
	for _, s := range servers {
		all, sub := clientCounts(s)
		res.AllConns[s], res.SubConns[s] = all-base[s], sub
	}
	return res
}
