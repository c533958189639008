package cluster

import (
	"fmt"

	"github.com/shardcast/shardcast/internal/engine"
)

// router tells the engine core where a channel lives: its path is its
// partition, carried by the subscribe link of the partition's master.
type router struct{ b *Broker }

func (r router) PathOf(channel string) int { return r.b.layout.Partition(channel) }

func (r router) Key(p int, channel string) string { return r.b.layout.PartitionKey(p, channel) }

func (r router) Carrier(p int) *engine.Link {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.b.linkForLocked(p)
}

// Carried returns the partitions l carries.
func (r router) Carried(l *engine.Link) []int {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, p := range b.assign.PartitionsOf(l.Addr) {
		if b.linkForLocked(p) == l {
			out = append(out, p)
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
	return fmt.Sprintf("partition %d (slot %d)", p, r.b.layout.Slot(p))
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
