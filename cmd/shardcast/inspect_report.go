package main

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
)

// This file turns what inspect read from Redis into its report. Nothing
// here does I/O.

// sample is one node's two INFO reads and what else inspect learnt of it.
type sample struct {
	Before, After nodeStats
	// Elapsed is the local time between the two reads, used when INFO has
	// no server clock.
	Elapsed time.Duration
	Output  outputStats
	// Err says why the node could not be read; the other fields are then
	// zero.
	Err error
}

// elapsed is the sample's length: the server's own clock when it has one.
func (s sample) elapsed() time.Duration {
	if !s.Before.At.IsZero() && s.After.At.After(s.Before.At) {
		return s.After.At.Sub(s.Before.At)
	}
	return s.Elapsed
}

// rate returns the calls of cmd during the sample, per second, and the
// total since the server started.
func (s sample) rate(cmd string) callRate {
	r := callRate{Total: s.After.Calls[cmd]}
	if d := s.elapsed(); d > 0 {
		r.PerSecond = float64(max(0, r.Total-s.Before.Calls[cmd])) / d.Seconds()
	}
	return r
}

// cpuPercent is the share of one core the server used during the sample.
func (s sample) cpuPercent() float64 {
	d := s.elapsed()
	if d <= 0 {
		return 0
	}
	return max(0, s.After.CPU-s.Before.CPU) / d.Seconds() * 100
}

// clients is connected_clients without inspect's own connection.
func (s sample) clients() int { return max(0, s.After.Clients-1) }

// callRate is how often a command ran.
type callRate struct {
	Total     int64   `json:"total"`
	PerSecond float64 `json:"per_second"`
}

// balance compares the busiest of a set of loads with their mean.
type balance struct {
	Busiest float64 `json:"busiest"`
	Mean    float64 `json:"mean"`
	// Ratio is Busiest/Mean: 1 is perfect balance; capacity is capped by
	// the busiest member. 0 when there is nothing to compare.
	Ratio float64 `json:"ratio"`
}

func balanceOf(loads []float64) balance {
	if len(loads) == 0 {
		return balance{}
	}
	var sum, busiest float64
	for _, l := range loads {
		sum += l
		busiest = max(busiest, l)
	}
	b := balance{Busiest: busiest, Mean: sum / float64(len(loads))}
	if b.Mean > 0 {
		b.Ratio = b.Busiest / b.Mean
	}
	return b
}

// clusterView is everything inspect read from a cluster.
type clusterView struct {
	Seed  string
	Slots shardcast.SlotMap
	// Nodes is the seed's CLUSTER NODES; nil if it could not be read.
	Nodes []clusterNode
	// Masters and Replicas are keyed by address.
	Masters map[string]sample
	// ReplicaLinks holds each replica's own master_link_status, or why it
	// could not be asked.
	ReplicaLinks map[string]string
	// Record is the application's layout record, read from the master of
	// its slot.
	Record recordInfo
}

// clusterReport is inspect's answer for a cluster.
type clusterReport struct {
	Seed        string `json:"seed"`
	Partitions  int    `json:"partitions"`
	Prefix      string `json:"prefix"`
	Fingerprint string `json:"fingerprint"`
	// Record is the application's layout record; LayoutNote says whether
	// the report's layout is the recorded one (see clusterLayout).
	Record        recordInfo     `json:"layout_record"`
	LayoutNote    string         `json:"layout_note"`
	SampleSeconds float64        `json:"sample_seconds"`
	Masters       []masterReport `json:"masters"`
	// Balance compares the partitions per master that own slots under the
	// shipped tags; NaiveBalance does the same for tags {0}..{N-1}.
	Balance      balance `json:"partition_balance"`
	NaiveBalance balance `json:"naive_partition_balance"`
	// SPublishBalance compares the masters' SPUBLISH rates in the sample.
	SPublishBalance balance `json:"spublish_balance"`
	// Unowned lists partitions whose slot no master serves.
	Unowned []int `json:"unowned_partitions,omitempty"`
	// Idle lists masters that own no partition.
	Idle []string `json:"masters_without_partitions,omitempty"`
}

// masterReport is one master of a cluster.
type masterReport struct {
	Addr            string          `json:"addr"`
	ID              string          `json:"id,omitempty"`
	Slots           int             `json:"slots"`
	SlotRanges      []string        `json:"slot_ranges"`
	Partitions      []partitionInfo `json:"partitions"`
	NaivePartitions int             `json:"naive_partitions"`
	ShardChannels   int             `json:"pubsubshard_channels"`
	SPublish        callRate        `json:"spublish"`
	SSubscribe      callRate        `json:"ssubscribe"`
	Clients         int             `json:"clients"`
	CPUPercent      float64         `json:"cpu_percent"`
	RecentMaxOutput int64           `json:"client_recent_max_output_buffer"`
	Output          outputStats     `json:"output_buffers"`
	Replicas        []replicaLink   `json:"replicas"`
	Error           string          `json:"error,omitempty"`
}

// partitionInfo is one partition of a layout.
type partitionInfo struct {
	Partition int    `json:"partition"`
	Tag       string `json:"tag"`
	Slot      uint16 `json:"slot"`
}

// naiveSlot is the slot partition p would have with the tag "{p}".
func naiveSlot(p int) uint16 { return cluster.KeySlot("{" + strconv.Itoa(p) + "}") }

// buildClusterReport computes the report of layout l over what v holds.
func buildClusterReport(l *shardcast.Layout, v clusterView) clusterReport {
	n := l.Partitions()
	assign := v.Slots.Assign(l.Slot, n)
	naive := v.Slots.Assign(naiveSlot, n)
	r := clusterReport{Seed: v.Seed, Partitions: n, Prefix: l.Prefix(), Fingerprint: l.Fingerprint(), Record: v.Record, Unowned: assign.PartitionsOf("")}

	masters := clusterMasters(v)
	var parts, naiveParts, spub []float64
	for _, m := range masters {
		s := v.Masters[m.Addr]
		for _, p := range assign.PartitionsOf(m.Addr) {
			m.Partitions = append(m.Partitions, partitionInfo{Partition: p, Tag: l.Tag(p), Slot: l.Slot(p)})
		}
		m.NaivePartitions = len(naive.PartitionsOf(m.Addr))
		if s.Err != nil {
			m.Error = s.Err.Error()
		} else {
			m.ShardChannels = s.After.ShardChannels
			m.SPublish, m.SSubscribe = s.rate("spublish"), s.rate("ssubscribe")
			m.Clients, m.CPUPercent = s.clients(), s.cpuPercent()
			m.RecentMaxOutput, m.Output = s.After.RecentMaxOutput, s.Output
			r.SampleSeconds = max(r.SampleSeconds, s.elapsed().Seconds())
		}
		m.Replicas = replicasOf(m, s, v)
		if m.Slots > 0 {
			parts = append(parts, float64(len(m.Partitions)))
			naiveParts = append(naiveParts, float64(m.NaivePartitions))
			spub = append(spub, m.SPublish.PerSecond)
		}
		if len(m.Partitions) == 0 {
			r.Idle = append(r.Idle, m.Addr)
		}
		r.Masters = append(r.Masters, m)
	}
	r.Balance, r.NaiveBalance, r.SPublishBalance = balanceOf(parts), balanceOf(naiveParts), balanceOf(spub)
	return r
}

// preferSlotMapEndpoints names the nodes as the slot map does: by their
// announced hostnames when it uses them (Redis 7's
// cluster-preferred-endpoint-type hostname), where CLUSTER NODES gives
// ip:port first. Without it one node would be two: a master with slots
// and an idle one, a replica named and one "not connected".
func (v *clusterView) preferSlotMapEndpoints() {
	named := map[string]bool{}
	for _, rg := range v.Slots.Ranges {
		named[rg.Master] = true
		for _, r := range rg.Replicas {
			named[r] = true
		}
	}
	byHost := false
	for _, nd := range v.Nodes {
		byHost = byHost || (nd.HostAddr != "" && named[nd.HostAddr])
	}
	if !byHost {
		return
	}
	for i, nd := range v.Nodes {
		if nd.HostAddr != "" {
			v.Nodes[i].Addr = nd.HostAddr
		}
	}
}

// nodeAddr returns how v names the node at addr, an ip:port a server
// reported (INFO's replica list): its slot-map name.
func (v clusterView) nodeAddr(addr string) string {
	for _, nd := range v.Nodes {
		if nd.IPAddr == addr {
			return nd.Addr
		}
	}
	return addr
}

// clusterMasters lists the masters: those the slot map names, ordered by
// their first slot, then the live slotless masters CLUSTER NODES shows,
// by address. Only Addr, ID, Slots and SlotRanges are set.
func clusterMasters(v clusterView) []masterReport {
	var out []masterReport
	index := map[string]int{}
	placed := map[string]bool{} // node IDs
	for _, rg := range v.Slots.Ranges {
		i, ok := index[rg.Master]
		if !ok {
			i = len(out)
			index[rg.Master] = i
			out = append(out, masterReport{Addr: rg.Master, ID: rg.MasterID})
		}
		if rg.MasterID != "" {
			placed[rg.MasterID] = true
		}
		out[i].Slots += int(rg.End) - int(rg.Start) + 1
		if rg.Start == rg.End {
			out[i].SlotRanges = append(out[i].SlotRanges, strconv.Itoa(int(rg.Start)))
		} else {
			out[i].SlotRanges = append(out[i].SlotRanges, fmt.Sprintf("%d-%d", rg.Start, rg.End))
		}
	}
	var empty []masterReport
	for _, nd := range v.Nodes {
		if !nd.master() || nd.failing() || nd.Addr == "" || placed[nd.ID] {
			continue
		}
		if _, ok := index[nd.Addr]; !ok {
			index[nd.Addr] = -1
			empty = append(empty, masterReport{Addr: nd.Addr, ID: nd.ID})
		}
	}
	slices.SortFunc(empty, func(a, b masterReport) int { return cmp.Compare(a.Addr, b.Addr) })
	return append(out, empty...)
}

// replicasOf merges what is known of m's replicas: CLUSTER NODES (who
// follows m, and whether the cluster thinks it failed), the slot map, the
// master's INFO (link state and lag as the master sees it) and the
// replica's own master_link_status.
func replicasOf(m masterReport, s sample, v clusterView) []replicaLink {
	byAddr := map[string]*replicaLink{}
	var order []string
	add := func(addr string) *replicaLink {
		if rl, ok := byAddr[addr]; ok {
			return rl
		}
		rl := &replicaLink{Addr: addr}
		byAddr[addr] = rl
		order = append(order, addr)
		return rl
	}
	for _, nd := range v.Nodes {
		if nd.MasterID == "" || nd.MasterID != m.ID || nd.Addr == "" {
			continue
		}
		rl := add(nd.Addr)
		if nd.failing() {
			rl.State = "failed"
		}
	}
	for _, rg := range v.Slots.Ranges {
		if rg.Master == m.Addr {
			for _, a := range rg.Replicas {
				add(a)
			}
		}
	}
	for _, seen := range s.After.Replicas {
		rl := add(v.nodeAddr(seen.Addr))
		if rl.State == "" {
			rl.State = seen.State
		}
		rl.Lag = seen.Lag
	}
	out := make([]replicaLink, 0, len(order))
	for _, a := range order {
		rl := byAddr[a]
		rl.Link = v.ReplicaLinks[a]
		if rl.State == "" {
			rl.State = "not connected"
		}
		out = append(out, *rl)
	}
	slices.SortFunc(out, func(a, b replicaLink) int { return cmp.Compare(a.Addr, b.Addr) })
	return out
}

// shardsView is everything inspect read from the sharded engine's
// instances, in the order the application lists them.
type shardsView struct {
	Addrs       []string
	Fingerprint string
	Samples     []sample
	// Record is the application's layout record, read from the control
	// instance.
	Record recordInfo
}

// shardsReport is inspect's answer for the sharded engine.
type shardsReport struct {
	Fingerprint string `json:"fingerprint"`
	// Record is the application's layout record; LayoutNote compares its
	// instance list with -shards.
	Record        recordInfo       `json:"layout_record"`
	LayoutNote    string           `json:"layout_note"`
	SampleSeconds float64          `json:"sample_seconds"`
	Instances     []instanceReport `json:"instances"`
	// ChannelBalance compares the channels subscribed per instance;
	// PublishBalance the PUBLISH rates in the sample.
	ChannelBalance balance `json:"channel_balance"`
	PublishBalance balance `json:"publish_balance"`
}

// instanceReport is one instance of the sharded engine.
type instanceReport struct {
	Index           int         `json:"index"`
	Addr            string      `json:"addr"`
	Channels        int         `json:"pubsub_channels"`
	Publish         callRate    `json:"publish"`
	Subscribe       callRate    `json:"subscribe"`
	Clients         int         `json:"clients"`
	CPUPercent      float64     `json:"cpu_percent"`
	RecentMaxOutput int64       `json:"client_recent_max_output_buffer"`
	Output          outputStats `json:"output_buffers"`
	Error           string      `json:"error,omitempty"`
}

func buildShardsReport(v shardsView) shardsReport {
	r := shardsReport{Fingerprint: v.Fingerprint, Record: v.Record, LayoutNote: shardsNote(v.Addrs, v.Record)}
	var chans, pubs []float64
	for i, addr := range v.Addrs {
		in := instanceReport{Index: i, Addr: addr}
		var s sample
		if i < len(v.Samples) {
			s = v.Samples[i]
		}
		if s.Err != nil {
			in.Error = s.Err.Error()
			r.Instances = append(r.Instances, in)
			continue
		}
		in.Channels = s.After.Channels
		in.Publish, in.Subscribe = s.rate("publish"), s.rate("subscribe")
		in.Clients, in.CPUPercent = s.clients(), s.cpuPercent()
		in.RecentMaxOutput, in.Output = s.After.RecentMaxOutput, s.Output
		r.SampleSeconds = max(r.SampleSeconds, s.elapsed().Seconds())
		chans = append(chans, float64(in.Channels))
		pubs = append(pubs, in.Publish.PerSecond)
		r.Instances = append(r.Instances, in)
	}
	r.ChannelBalance, r.PublishBalance = balanceOf(chans), balanceOf(pubs)
	return r
}
