package cluster

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
)

// The broker's subscribe paths come in two banks of bankSize paths: path
// bank*bankSize + p is partition p under the layout the bank holds. A
// partition number names the same tag, hence the same slot and master, in
// every layout (the tag table for N partitions is the first N entries of
// the one for 2N), so a re-layout that keeps the prefix keeps its bank: a
// channel whose partition does not change keeps its wire key and its
// path, and one that moves goes to another path of the same bank. A
// re-layout that changes the prefix changes every wire key; it puts the
// new layout in the other bank, since one path holds each channel under
// one key only. Banks are sized for the largest partition count, so that
// a broker can follow a re-layout to any supported count.
var bankSize = shardcast.SupportedPartitions()[len(shardcast.SupportedPartitions())-1]

// wide is the layout of every tag, without a prefix: it gives the slot of
// any partition number and reads the tag of any wire key. The topology
// (which master owns each partition) is kept for all of its partitions.
var wide = mustLayout(bankSize, "")

func mustLayout(partitions int, prefix string) *shardcast.Layout {
	l, err := shardcast.NewLayout(partitions, prefix)
	if err != nil {
		panic(err) // only called with supported counts
	}
	return l
}

// view is how the broker maps channels to partitions, paths and wire keys
// at one moment. It is immutable once stored (but for its in-flight
// count) and replaced whole by an online re-layout (docs/RELAYOUT.md).
type view struct {
	// cur is the layout in force, in bank curBank; curKeys holds each of
	// its partitions' "{tag}." + prefix.
	cur     *shardcast.Layout
	curBank int
	curKeys []string
	// next is the layout a re-layout moves to (nil when none is under
	// way), in bank nextBank; id and barrier name the re-layout and its
	// barrier channel.
	next        *shardcast.Layout
	nextBank    int
	nextKeys    []string
	id, barrier string
	// prefix holds the prefix of the layout each bank last held, so that
	// a bank's wire keys are known until its subscriptions are dropped.
	prefix [2]string
	// switched is set once moving channels are published under next.
	switched bool
	// inflight counts the publishes of moving channels sent under this
	// view and not yet answered: a re-layout step that replaced the view
	// waits for it to reach zero.
	inflight atomic.Int64
}

func newView(cur *shardcast.Layout, bank int, prefix [2]string) *view {
	prefix[bank] = cur.Prefix()
	return &view{cur: cur, curBank: bank, curKeys: partitionKeys(cur), prefix: prefix}
}

// withNext returns a copy of v moving to layout next under re-layout id.
func (v *view) withNext(next *shardcast.Layout, id, barrier string) *view {
	bank := v.curBank
	if next.Prefix() != v.cur.Prefix() {
		bank = 1 - v.curBank
	}
	nv := &view{cur: v.cur, curBank: v.curBank, curKeys: v.curKeys, prefix: v.prefix,
		next: next, nextBank: bank, nextKeys: partitionKeys(next), id: id, barrier: barrier}
	nv.prefix[bank] = next.Prefix()
	return nv
}

// copyView returns a copy of v with its own in-flight count.
func (v *view) copyView() *view {
	return &view{cur: v.cur, curBank: v.curBank, curKeys: v.curKeys, next: v.next, nextBank: v.nextBank,
		nextKeys: v.nextKeys, id: v.id, barrier: v.barrier, prefix: v.prefix, switched: v.switched}
}

func partitionKeys(l *shardcast.Layout) []string {
	keys := make([]string, l.Partitions())
	for p := range keys {
		keys[p] = l.PartitionKey(p, "")
	}
	return keys
}

// span returns how many partition numbers the layouts in use reach.
func (v *view) span() int {
	if v.next != nil {
		return max(v.cur.Partitions(), v.next.Partitions())
	}
	return v.cur.Partitions()
}

// partitions returns channel's partition under cur and, during a
// re-layout, under next (-1 when there is none); the channel moves when
// its wire key differs between the two.
func (v *view) partitions(channel string) (cur, next int, moving bool) {
	cur = v.cur.Partition(channel)
	if v.next == nil {
		return cur, -1, false
	}
	next = v.next.Partition(channel)
	return cur, next, cur != next || v.curBank != v.nextBank
}

// publishRoute returns the partition a publish of channel goes to, the
// "{tag}." + prefix of its wire key, and whether the channel moves in the
// re-layout under way.
func (v *view) publishRoute(channel string) (p int, keyPrefix string, moving bool) {
	cur, next, moving := v.partitions(channel)
	if moving && v.switched {
		return next, v.nextKeys[next], true
	}
	return cur, v.curKeys[cur], moving
}

// publishLayout returns the layout publishes go by: for every channel,
// moving or not, its partition under it is where its publishes go.
func (v *view) publishLayout() *shardcast.Layout {
	if v.next != nil && v.switched {
		return v.next
	}
	return v.cur
}

// layoutOf returns the layout in use in bank, nil if none is.
func (v *view) layoutOf(bank int) *shardcast.Layout {
	switch {
	case bank == v.curBank:
		return v.cur
	case v.next != nil && bank == v.nextBank:
		return v.next
	}
	return nil
}

// key returns channel's wire key on path.
func (v *view) key(path int, channel string) string {
	return "{" + wide.Tag(path%bankSize) + "}." + v.prefix[path/bankSize] + channel
}

// split returns the path and channel of a wire key: the tag names the
// partition, the prefix the bank. The re-layout's barrier wins outright:
// it is sent under every losing partition's tag, not its own, so the
// partition rule below would hand one of them to the other reading (with
// prefixes "x:" and "", "x:" + barrier name under ""), and that
// partition's barrier would never count. Otherwise, when both banks'
// prefixes match (one extends the other, "" extends every prefix), the
// bank whose layout puts the channel in that partition wins; if both do,
// the one whose path wants its channel (wants may be nil), then the
// longer prefix.
func (v *view) split(key string, wants func(path int, channel string) bool) (path int, channel string, ok bool) {
	p, rest, ok := wide.SplitKey(key)
	if !ok {
		return 0, "", false
	}
	best := -1
	for _, bank := range [2]int{v.curBank, 1 - v.curBank} {
		pre := v.prefix[bank]
		if len(rest) <= len(pre) || !strings.HasPrefix(rest, pre) {
			continue
		}
		ch := rest[len(pre):]
		if v.barrier != "" && ch == v.barrier || strings.HasPrefix(ch, engine.ProbeChannelPrefix) {
			// A barrier or a probe (whose path is not its partition
			// under a layout) is read under the prefix it names.
			return bank*bankSize + p, ch, true
		}
		if best < 0 {
			best, channel = bank, ch
			continue
		}
		l, lb := v.layoutOf(bank), v.layoutOf(best)
		if l == nil || l.Partition(ch) != p {
			continue
		}
		if lb != nil && lb.Partition(channel) == p {
			// Both readings are plausible: ask the subscriptions.
			in, inBest := true, true
			if wants != nil {
				in, inBest = wants(bank*bankSize+p, ch), wants(best*bankSize+p, channel)
			}
			if in == inBest && len(pre) < len(v.prefix[best]) || !in && inBest {
				continue
			}
		}
		best, channel = bank, ch
	}
	if best < 0 {
		return 0, "", false
	}
	return best*bankSize + p, channel, true
}

// losing returns the partitions of layout from that lose channels when
// it becomes layout to: every one when the prefix changes or the count
// grows (jump hashing moves some channels out of every partition),
// otherwise those past to's count. The coordinator sends a barrier
// through each; subscribers wait for one on each.
func losing(from, to *shardcast.Layout) []int {
	var out []int
	for p := range from.Partitions() {
		if from.Prefix() != to.Prefix() || to.Partitions() > from.Partitions() || p >= to.Partitions() {
			out = append(out, p)
		}
	}
	return out
}

// inUse keeps the moves of partitions both assignments cover: a
// re-layout that grows or shrinks the partitions in use adds or drops
// partitions, which is no move.
func inUse(old, assign shardcast.Assignment, moved []partitionMove) []partitionMove {
	n := min(len(old), len(assign))
	return slices.DeleteFunc(moved, func(mv partitionMove) bool { return mv.Partition >= n })
}

// masterChanges returns, sorted, the masters that own partitions in assign
// and none in old (added), and the reverse (removed).
func masterChanges(old, assign shardcast.Assignment) (added, removed []string) {
	before, after := old.Masters(), assign.Masters()
	for _, m := range after {
		if _, found := slices.BinarySearch(before, m); !found {
			added = append(added, m)
		}
	}
	for _, m := range before {
		if _, found := slices.BinarySearch(after, m); !found {
			removed = append(removed, m)
		}
	}
	return added, removed
}

// countedPoll is poll, counted in polls and pollsDone.
func (b *Broker) countedPoll(ctx context.Context) {
	b.polls.Add(1)
	defer b.pollsDone.Add(1)
	b.poll(ctx)
}

// awaitTopology asks for slot-map passes until one that began after the
// view in force was stored applied it: every partition the view reaches
// has its master in the assignment (a pass begun before could still
// install an assignment sized for the view before).
func (b *Broker) awaitTopology(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		target := b.polls.Load() + 1
		b.core.RequestRefresh()
		for b.pollsDone.Load() < target {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-b.core.Closing():
				return shardcast.ErrClosed
			case <-tick.C:
			}
		}
		b.mu.Lock()
		n := len(b.assign)
		b.mu.Unlock()
		if n >= b.view.Load().span() {
			return nil
		}
	}
}
