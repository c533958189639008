package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/bench/internal/measure"
)

type broadcastResult struct {
	Scenario      string  `json:"scenario"`
	Masters       int     `json:"masters"`
	Command       string  `json:"command"`
	Messages      int     `json:"messages"`
	BusSent       int     `json:"bus_messages_sent"`
	BusPublish    int     `json:"bus_publish_messages_sent"`
	BusPerMsg     float64 `json:"bus_messages_per_publish"`
	RedisCPUusPer float64 `json:"redis_cpu_us_per_publish"`
	Seconds       float64 `json:"seconds"`
}

// runBroadcast compares classic PUBLISH, which Redis Cluster copies to
// every node over the cluster bus, with SPUBLISH, which stays on the owner.
func runBroadcast(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "broadcast", Title: "Broadcast cost: classic PUBLISH versus SPUBLISH"}
	layout, err := shardcast.NewLayout(128, "")
	if err != nil {
		return sec, err
	}
	const messages = 50000
	var rows [][]string
	cpu := map[string]map[int]float64{"PUBLISH": {}, "SPUBLISH": {}}
	for _, m := range []int{3, 6} {
		seeds, _, servers, err := e.clusterMasters(ctx, m)
		if err != nil {
			return sec, err
		}
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
		for _, cmd := range []string{"PUBLISH", "SPUBLISH"} {
			progress("broadcast: %d masters, %d × %s …", m, messages, cmd)
			bus0, pub0 := busSent(servers)
			rcpu0 := measure.RedisCPU(servers)
			t0 := time.Now()
			payload := make([]byte, cfg.payload)
			for i := 0; i < messages; i += 500 {
				pipe := client.Pipeline()
				for j := i; j < i+500; j++ {
					ch := "bc:" + strconv.Itoa(j%1000)
					if cmd == "PUBLISH" {
						pipe.Publish(ctx, layout.Key(ch), payload)
					} else {
						pipe.SPublish(ctx, layout.Key(ch), payload)
					}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					client.Close()
					return sec, fmt.Errorf("%s: %w", cmd, err)
				}
			}
			secs := time.Since(t0).Seconds()
			// The bus forwards asynchronously; give it a moment to flush.
			time.Sleep(200 * time.Millisecond)
			bus1, pub1 := busSent(servers)
			rcpu1 := measure.RedisCPU(servers)
			r := broadcastResult{Scenario: "broadcast", Masters: m, Command: cmd, Messages: messages, BusSent: bus1 - bus0, BusPublish: pub1 - pub0,
				Seconds: secs}
			r.BusPerMsg = float64(r.BusSent) / messages
			r.RedisCPUusPer = float64(rcpu1-rcpu0) / 1e3 / messages
			cpu[cmd][m] = r.RedisCPUusPer
			emit(r)
			rows = append(rows, []string{strconv.Itoa(m), cmd, strconv.Itoa(r.BusSent), strconv.Itoa(r.BusPublish), fmt.Sprintf("%.2f", r.BusPerMsg),
				fmt.Sprintf("%.2fµs", r.RedisCPUusPer), fmtRate(messages / secs)})
		}
		client.Close()
		if ctx.Err() != nil {
			return sec, ctx.Err()
		}
	}
	tbl := table([]string{"masters", "command", "bus messages sent (all nodes)", "of which publish/publishshard", "bus msgs per publish", "Redis CPU per publish (all nodes)", "publish rate"}, rows)
	show("broadcast\n" + tbl)
	sec.Body = fmt.Sprintf("%d publishes of %d bytes over 1,000 channels (keys with shardcast's tags, so SPUBLISH is valid), sent with go-redis "+
		"pipelines of 500, no subscribers, clusters without replicas. Bus counts are the rise of `cluster_stats_messages_sent` (and of its "+
		"`_publish_`/`_publishshard_` parts) from CLUSTER INFO summed over all nodes, including the cluster's own ping/pong during the run; "+
		"Redis CPU is INFO used_cpu_sys+used_cpu_user summed over all nodes.\n\n%s\n", messages, cfg.payload, tbl)
	for _, m := range []int{3, 6} {
		if cpu["SPUBLISH"][m] > 0 {
			sec.Targets = append(sec.Targets, target{fmt.Sprintf("broadcast (no numeric target): Redis CPU per message, PUBLISH / SPUBLISH, %d masters", m),
				fmt.Sprintf("%.2f×", cpu["PUBLISH"][m]/cpu["SPUBLISH"][m]), "reported"})
		}
	}
	return sec, nil
}

func busSent(servers []string) (all, publish int) {
	for _, s := range servers {
		all += measure.ClusterStat(s, "cluster_stats_messages_sent")
		publish += measure.ClusterStat(s, "cluster_stats_messages_publish_sent") + measure.ClusterStat(s, "cluster_stats_messages_publishshard_sent")
	}
	return all, publish
}
