package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/bench/internal/launch"
)

// fleetPartitioner returns how an engine maps a channel to one of its 128
// partitions, so the fleet scenario can probe every partition of every
// broker with one channel each.
func fleetPartitioner(engine string) (func(string) int, error) {
	switch {
	case engine == "shardcast-cluster":
		l, err := shardcast.NewLayout(128, "")
		if err != nil {
			return nil, err
		}
		return l.Partition, nil
	case strings.HasPrefix(engine, "centrifuge-sharded"):
		// Centrifuge v0.40.1 picks the partition with a jump consistent hash
		// (Lamping & Veach) of the channel's FNV-1a 64 hash; the precomputed
		// tags change only the hash tag, not the index.
		return func(ch string) int {
			h := fnv.New64a()
			_, _ = h.Write([]byte(ch))
			return jumpHash(h.Sum64(), 128)
		}, nil
	}
	return nil, fmt.Errorf("fleet: no partition mapping for engine %q (use shardcast-cluster, centrifuge-sharded, centrifuge-sharded-tags)", engine)
}

// jumpHash is the jump consistent hash of Lamping & Veach (2014).
func jumpHash(key uint64, buckets int) int {
	b, j := int64(-1), int64(0)
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// probeChannels picks, for every partition that holds any of names, the
// first of them in that partition.
func probeChannels(names []string, partition func(string) int) []string {
	seen := map[int]bool{}
	var out []string
	for _, ch := range names {
		if p := partition(ch); !seen[p] {
			seen[p] = true
			out = append(out, ch)
		}
	}
	return out
}

// centrifugePartitionsAgree checks the partition mapping used for the
// probes against the channel names Centrifuge subscribed on the servers
// ("…{p}.channel" without precomputed tags): a wrong mapping would leave
// partitions unprobed without failing anything.
func centrifugePartitionsAgree(ctx context.Context, servers []string, prefix string, probes []string, partition func(string) int) error {
	want := map[string]int{}
	for _, ch := range probes {
		want[ch] = partition(ch)
	}
	found := 0
	for _, s := range servers {
		names, err := shardChannelNames(ctx, s, "*}."+prefix+"*")
		if err != nil {
			return err
		}
		for _, full := range names {
			end := strings.Index(full, "}."+prefix)
			if end < 0 {
				continue
			}
			open := strings.LastIndexByte(full[:end], '{')
			p, ok := want[full[end+2:]]
			if open < 0 || !ok {
				continue
			}
			got, err := strconv.Atoi(full[open+1 : end])
			if err != nil {
				return nil // precomputed tags: nothing to compare against
			}
			if got != p {
				return fmt.Errorf("fleet: channel %s is in Centrifuge partition %d, the probe mapping says %d", full[end+2:], got, p)
			}
			found++
		}
	}
	if found != len(probes) {
		return fmt.Errorf("fleet: found %d of %d probe channels on the servers", found, len(probes))
	}
	return nil
}

func shardChannelNames(ctx context.Context, addr, pattern string) ([]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return c.PubSubShardChannels(ctx, pattern).Result()
}

// cpuPeaks samples used_cpu_sys+used_cpu_user (INFO cpu) of every server
// at a fixed interval and keeps the highest rate seen per server and for
// the sum, in percent of one core.
type cpuPeaks struct {
	mu      sync.Mutex
	Peak    map[string]float64
	PeakSum float64
	Samples int
}

// sampleCPU runs until ctx ends; wait for the returned channel before
// reading the peaks.
func sampleCPU(ctx context.Context, servers []string, every time.Duration) (*cpuPeaks, <-chan struct{}) {
	c := &cpuPeaks{Peak: map[string]float64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]cpuSample{}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			sum, complete := 0.0, true
			for _, s := range servers {
				r, err := cpuReading(s)
				if err != nil {
					complete = false
					continue
				}
				if prev, ok := last[s]; ok && r.at.After(prev.at) {
					pct := 100 * float64(r.cpu-prev.cpu) / float64(r.at.Sub(prev.at))
					sum += pct
					c.mu.Lock()
					c.Peak[s] = max(c.Peak[s], pct)
					c.mu.Unlock()
				} else {
					complete = false
				}
				last[s] = r
			}
			if complete {
				c.mu.Lock()
				c.PeakSum = max(c.PeakSum, sum)
				c.Samples++
				c.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return c, done
}

// cpuSample is a server's CPU time and its own clock (server_time_usec)
// from one INFO reply, so a reply delayed on the way does not distort the
// rate.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

func cpuReading(addr string) (cpuSample, error) {
	out, err := launch.Command(addr, "INFO", "server", "cpu")
	if err != nil {
		return cpuSample{}, err
	}
	var r cpuSample
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "server_time_usec":
			us, _ := strconv.ParseInt(v, 10, 64)
			r.at = time.UnixMicro(us)
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			r.cpu += time.Duration(f * float64(time.Second))
		}
	}
	if r.at.IsZero() {
		return r, fmt.Errorf("%s: INFO has no server_time_usec", addr)
	}
	return r, nil
}
