package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/internal/relayout"
)

// steps is what the cluster engine does at each step of an online
// re-layout (relayout.Engine; docs/RELAYOUT.md): it changes the broker's
// view, subscribes the twins of moving channels and the barriers, and
// drops what the layout it left needed.
type steps struct{ b *Broker }

// barrierPaths returns the paths of the old layout's partitions that
// lose channels (none on a publish-only broker): a barrier comes through
// each.
func (b *Broker) barrierPaths(v *view) []int {
	if b.core.Paths == nil {
		return nil
	}
	var out []int
	for _, p := range losing(v.cur, v.next) {
		out = append(out, v.curBank*bankSize+p)
	}
	return out
}

// Prepare makes t's new layout the broker's next one, subscribes every
// moving channel it wants under it too (a channel moves when its wire key
// changes) and the barrier on each of the old layout's partitions that
// lose channels, and holds back what moving channels bring under the new
// layout until the barrier of their old partition arrived.
func (s steps) Prepare(ctx context.Context, t *agreement.Transition, fromRec shardcast.LayoutRecord) (int, error) {
	b := s.b
	next, err := shardcast.NewLayout(t.ToRecord.Partitions, t.ToRecord.Prefix)
	if err != nil || next.Fingerprint() != t.To {
		return 0, fmt.Errorf("%w %s to %s (%s): %v", relayout.ErrCannotFollow, t.ID, t.To, t.ToRecord.Description, err)
	}
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return 0, err
	}
	defer b.gate.Unlock()
	v := b.view.Load()
	if v.id != t.ID {
		if v.cur.Fingerprint() != t.From {
			// Configured with the new layout and started mid-way: it
			// subscribed nothing yet (New follows before it returns).
			from, err := shardcast.NewLayout(fromRec.Partitions, fromRec.Prefix)
			if err != nil {
				return 0, fmt.Errorf("%w %s: the recorded layout: %w", relayout.ErrCannotFollow, t.ID, err)
			}
			v = newView(from, v.curBank, v.prefix)
		}
		v = v.withNext(next, t.ID, t.Barrier)
		if v.nextBank != v.curBank && b.core.Paths != nil {
			b.takeBank(v.nextBank)
		}
		b.hand.Reset(b.barrierPaths(v))
		b.view.Store(v)
	}
	// The new layout's partitions need their masters before anything is
	// subscribed or published there.
	if err := b.awaitTopology(ctx); err != nil {
		return 0, fmt.Errorf("waiting for the topology of the new partitions: %w", err)
	}
	if b.core.Paths == nil {
		return 0, nil
	}
	groups := map[int][]string{}
	moving := 0
	for p := range v.cur.Partitions() {
		path := v.curBank*bankSize + p
		for _, ch := range b.core.Paths[path].Wanted() {
			if ch == v.barrier {
				continue
			}
			cur, next, mv := v.partitions(ch)
			if mv && cur == p {
				q := v.nextBank*bankSize + next
				groups[q] = append(groups[q], ch)
				moving++
			}
		}
	}
	for _, p := range b.barrierPaths(v) {
		groups[p] = append(groups[p], v.barrier)
	}
	if err := b.core.SubscribeGroups(ctx, relayout.ToGroups(groups)); err != nil {
		return 0, fmt.Errorf("subscribing under the new layout: %w", err)
	}
	return moving, nil
}

// Route stores a copy of the view that publishes moving channels under
// the new layout (switched) or the old one, unless the view in force
// does, and returns the in-flight count of the view it replaced.
func (s steps) Route(switched bool) *atomic.Int64 {
	b := s.b
	old := b.view.Load()
	if old.switched == switched {
		return nil
	}
	nv := old.copyView()
	nv.switched = switched
	b.view.Store(nv)
	return &old.inflight
}

// TwinChannels returns the moving channels the broker subscribes under
// the next layout of the view in force.
func (s steps) TwinChannels() []string {
	b := s.b
	v := b.view.Load()
	if b.core.Paths == nil || v.next == nil {
		return nil
	}
	var out []string
	for p := range v.next.Partitions() {
		for _, ch := range b.core.Paths[v.nextBank*bankSize+p].Wanted() {
			if ch == v.barrier {
				continue
			}
			if _, next, mv := v.partitions(ch); mv && next == p {
				out = append(out, ch)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Fingerprint returns the fingerprint of the layout in force.
func (s steps) Fingerprint() string { return s.b.Fingerprint() }

// NextFingerprint returns the fingerprint of the layout the re-layout
// under way moves to.
func (s steps) NextFingerprint() string {
	if v := s.b.view.Load(); v.next != nil {
		return v.next.Fingerprint()
	}
	return ""
}

// Finish makes the new layout the one in force and drops the old
// layout's subscriptions of moved channels and the barriers. Called
// again after a failure, it retries the drop.
func (s steps) Finish(ctx context.Context, to shardcast.LayoutRecord) error {
	b := s.b
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return err
	}
	defer b.gate.Unlock()
	if v := b.view.Load(); v.next != nil {
		if v.next.Fingerprint() != to.Fingerprint {
			return fmt.Errorf("shardcast: re-layout finishes to %s, the broker moves to %s", to.Fingerprint, v.next.Fingerprint())
		}
		b.view.Store(newView(v.next, v.nextBank, v.prefix))
		b.core.RequestRefresh() // the topology of partitions no longer used goes
	}
	return b.settle(ctx)
}

// Revert returns to the old layout alone after an aborted re-layout
// ended, and drops the new layout's subscriptions and the barriers.
func (s steps) Revert(ctx context.Context) error {
	b := s.b
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return err
	}
	defer b.gate.Unlock()
	if v := b.view.Load(); v.next != nil {
		b.view.Store(newView(v.cur, v.curBank, v.prefix))
		b.core.RequestRefresh()
	}
	return b.settle(ctx)
}

// settle drops every subscription the view in force does not route to
// its path: the other layout's copies of moved channels, and the
// barriers (their names are reserved for the agreement). The caller
// holds the gate.
func (b *Broker) settle(ctx context.Context) error {
	if b.core.Paths == nil {
		return nil
	}
	barriers := layoutkey.Barrier(b.cfg.Agreement, "")
	rt := router{b}
	groups := map[int][]string{}
	for p, path := range b.core.Paths {
		if path.WantedCount() == 0 {
			continue
		}
		for _, ch := range path.Wanted() {
			if strings.HasPrefix(ch, barriers) || rt.PathOf(ch) != p {
				groups[p] = append(groups[p], ch)
			}
		}
	}
	if len(groups) == 0 {
		return nil
	}
	if err := b.core.UnsubscribeGroups(ctx, relayout.ToGroups(groups)); err != nil {
		return fmt.Errorf("shardcast: re-layout: dropping the old subscriptions: %w", err)
	}
	return nil
}
