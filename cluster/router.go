package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
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

func (r router) KeyPrefix(p int) string { return r.b.view.Load().key(p, "") }

func (r router) Carrier(p int) *engine.Link {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.b.linkForLocked(p % bankSize)
}

// Carriers returns Carrier of each path in ids, under one lock.
func (r router) Carriers(ids []int) []*engine.Link {
	out := make([]*engine.Link, len(ids))
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	for i, p := range ids {
		out[i] = r.b.linkForLocked(p % bankSize)
	}
	return out
}

// Carried returns the paths l carries: those of its master's partitions
// that it carries, in both banks.
func (r router) Carried(l *engine.Link) []int {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, p := range b.subs.PartitionsOf(l.Addr) {
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
	for _, links := range r.b.nodes {
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
	if part >= len(b.subs) {
		return nil
	}
	links := b.nodes[b.subs[part]]
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

// dest is where a cluster publish goes: partition p's master, under the
// wire-key prefix keyPrefix ("{tag}." + prefix).
type dest struct {
	p         int
	keyPrefix string
}

// publishRoute is the cluster's engine.PublishRoute: a channel goes to
// its partition under the view, on the publishing connection of the
// partition's master, following redirections (redirect.go).
type publishRoute struct{ b *Broker }

func (r publishRoute) Dest(v *view, channel string) (dest, *atomic.Int64) {
	p, keyPrefix, moving := v.publishRoute(channel)
	if moving {
		return dest{p, keyPrefix}, &v.inflight
	}
	return dest{p, keyPrefix}, nil
}

func (r publishRoute) ProbeDest(channel string) dest {
	v, path := r.b.view.Load(), router{r.b}.PathOf(channel)
	return dest{path % bankSize, v.key(path, "")}
}

func (r publishRoute) SendTo(ctx context.Context, d dest, channel string, payload []byte) error {
	return r.b.send(ctx, d.p, d.keyPrefix, channel, payload)
}

// EvalAt fails with ErrInvalidKey, before anything is sent, unless there
// are keys and every one hashes to d's slot.
func (r publishRoute) EvalAt(ctx context.Context, d dest, channel string, s *shardcast.Script, keys, args []string) (any, error) {
	if err := checkKeys(channel, d.p, keys); err != nil {
		return nil, err
	}
	return r.b.evalPartition(ctx, d.p, s, keys, args, false)
}

// QueueTo queues call a's message on the connection to d's master.
func (r publishRoute) QueueTo(ctx context.Context, a *engine.AsyncCall, d dest, channel string, payload []byte) error {
	b := r.b
	pub, err := b.awaitRoute(ctx, d.p)
	if err == nil && pub == nil {
		b.core.Kick()
		err = errNoMaster
	}
	if err == nil {
		err = pub.SPublishAsync(ctx, d.keyPrefix, channel, payload, b.core.Options.Raw, engine.PublishTime(), a.Finish())
	}
	if err == nil {
		return nil
	}
	if b.core.Closed() {
		return shardcast.ErrClosed
	}
	return fmt.Errorf("shardcast: publish: %w", err)
}

// AsyncFailed kicks the slot map (any failure may mean a stale route) and
// marks a redirection or a refusal for now, which did not run the
// message, as not sent.
func (r publishRoute) AsyncFailed(_ string, err error) error {
	b := r.b
	if b.core.Closed() {
		return shardcast.ErrClosed
	}
	b.core.Kick()
	if (engine.IsMoved(err) || refusedForNow(err)) && !errors.Is(err, pubconn.ErrNotSent) {
		err = fmt.Errorf("%w: %w", shardcast.ErrNotSent, err)
	}
	return fmt.Errorf("shardcast: publish: %w", err)
}
