package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/bench/internal/measure"
)

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM), written out here so
// the naive tags are placed independently of shardcast's own code.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is CLUSTER KEYSLOT: the hash of the first non-empty {tag}.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

type balanceResult struct {
	Scenario     string         `json:"scenario"`
	Masters      int            `json:"masters"`
	Scheme       string         `json:"scheme"`
	Partitions   map[string]int `json:"partitions_per_master"`
	Spublish     map[string]int `json:"spublish_per_master"`
	Messages     int            `json:"messages"`
	BusiestShare float64        `json:"busiest_over_mean"`
}

// runBalance shows how 128 partitions and uniform traffic spread over the
// masters, shipped tags versus naive {0}..{127}.
func runBalance(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "balance", Title: "Balance: shipped tags versus naive {0}..{127}"}
	layout, err := shardcast.NewLayout(128, "")
	if err != nil {
		return sec, err
	}
	const messages = 128000
	var rows [][]string
	worst := map[string]float64{}
	for _, m := range []int{3, 6, 12} {
		seeds, sm, servers, err := e.clusterMasters(ctx, m)
		if err != nil {
			return sec, err
		}
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
		for _, scheme := range []string{"shipped", "naive"} {
			key := func(ch string) string { return layout.Key(ch) }
			tagSlot := func(p int) int { return int(layout.Slot(p)) }
			if scheme == "naive" {
				key = func(ch string) string { return "{" + strconv.Itoa(layout.Partition(ch)) + "}." + ch }
				tagSlot = func(p int) int { return int(crc16(strconv.Itoa(p)) % 16384) }
			}
			r := balanceResult{Scenario: "balance", Masters: m, Scheme: scheme, Partitions: map[string]int{}, Spublish: map[string]int{}, Messages: messages}
			for p := range 128 {
				r.Partitions[ownerOf(sm, tagSlot(p))]++
			}
			progress("balance: %d masters, %s tags, %d SPUBLISH …", m, scheme, messages)
			before := map[string]int{}
			for _, s := range servers {
				before[s] = measure.CommandCalls(s, "spublish")
			}
			payload := make([]byte, 16)
			for i := 0; i < messages; i += 1000 {
				pipe := client.Pipeline()
				for j := i; j < i+1000; j++ {
					ch := "bal:" + strconv.Itoa(j%20000)
					if got := keySlot(key(ch)); scheme == "shipped" && got != int(layout.Slot(layout.Partition(ch))) {
						client.Close()
						return sec, fmt.Errorf("slot of %q: CRC16 %d, layout %d", key(ch), got, layout.Slot(layout.Partition(ch)))
					}
					pipe.SPublish(ctx, key(ch), payload)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					client.Close()
					return sec, fmt.Errorf("spublish: %w", err)
				}
			}
			maxN, sum := 0, 0
			var parts, msgs []string
			for _, s := range servers {
				n := measure.CommandCalls(s, "spublish") - before[s]
				r.Spublish[s] = n
				sum += n
				maxN = max(maxN, n)
				parts = append(parts, strconv.Itoa(r.Partitions[s]))
				msgs = append(msgs, strconv.Itoa(n))
			}
			if sum > 0 {
				r.BusiestShare = float64(maxN) / (float64(sum) / float64(len(servers)))
			}
			worst[scheme] = max(worst[scheme], r.BusiestShare)
			emit(r)
			rows = append(rows, []string{strconv.Itoa(m), scheme, strings.Join(parts, " / "), strings.Join(msgs, " / "), fmt.Sprintf("%.2f", r.BusiestShare)})
		}
		client.Close()
		if ctx.Err() != nil {
			return sec, ctx.Err()
		}
	}
	tbl := table([]string{"masters", "tags", "partitions per master (CRC16 + live slot map)", "SPUBLISH per master (INFO commandstats)", "busiest / mean"}, rows)
	show("balance\n" + tbl)
	sec.Body = fmt.Sprintf("Clusters created by `redis-cli --cluster create` (its even slot split), no replicas. Channels `bal:0`…`bal:19999`, "+
		"%d SPUBLISH in total spread uniformly, sent with go-redis pipelines. Both schemes use shardcast's channel→partition function; "+
		"*shipped* uses shardcast's tag table (`Layout.Key`), *naive* uses the partition number as the hash tag. Partition counts are computed "+
		"by hand (CRC16 written in the benchmark, slot owners from CLUSTER SLOTS); message counts are the rise of `cmdstat_spublish` on each master. "+
		"*busiest / mean* is what caps capacity: the busiest master saturates first.\n\n%s\n", messages, tbl)
	sec.Targets = append(sec.Targets, target{"balance (no numeric target): busiest master / mean, worst over 3, 6, 12 masters",
		fmt.Sprintf("shipped %.2f, naive %.2f", worst["shipped"], worst["naive"]), "reported"})
	return sec, nil
}
