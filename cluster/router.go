package cluster

import (
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast/internal/engine"
)

// router tells the engine core where a channel lives: its path is its
// partition under the layout in force, in that layout's bank (see
// view.go), carried by the subscribe link of the partition's master.
type router struct{ b *Broker }

func (r router) PathOf(channel string) int {
	if strings.HasPrefix(channel, engine.ProbeChannelPrefix) {
		// Probes test paths, whatever the layout: spread over every path.
		return int(xxhash.Sum64String(channel) % uint64(2*bankSize))
	}
	v := r.b.view.Load()
	return v.curBank*bankSize + v.cur.Partition(channel)
}

func (r router) Key(p int, channel string) string { return r.b.view.Load().key(p, channel) }

func (r router) Carrier(p int) *engine.Link {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.b.linkForLocked(p % bankSize)
}

// Carried returns the paths l carries: those of its master's partitions
// that it carries, in both banks.
func (r router) Carried(l *engine.Link) []int {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, p := range b.assign.PartitionsOf(l.Addr) {
		if b.linkForLocked(p) == l {
			out = append(out, p, bankSize+p)
		}
	}
	return out
}

func (r router) Links() []*engine.Link {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	var out []*engine.Link
	for _, links := range r.b.masters {
		out = append(out, links...)
	}
	return out
}

func (r router) Describe(p int) string {
	if p >= bankSize {
		return fmt.Sprintf("partition %d (slot %d, second bank)", p%bankSize, wide.Slot(p%bankSize))
	}
	return fmt.Sprintf("partition %d (slot %d)", p, wide.Slot(p))
}

// linkForLocked returns the subscribe link that carries partition part,
// or nil while its slot has no master. The caller holds b.mu.
func (b *Broker) linkForLocked(part int) *engine.Link {
	if part >= len(b.assign) {
		return nil
	}
	links := b.masters[b.assign[part]]
	if len(links) == 0 {
		return nil
	}
	return links[part%len(links)]
}

// partitionsOf returns the partitions the master at addr owns.
func (b *Broker) partitionsOf(addr string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.assign.PartitionsOf(addr)
}
