package shardcast

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// defaultResubscribeWorkers is the number of groups a Resubscriber sends
// at once when its Workers field is zero.
const defaultResubscribeWorkers = 16

// errNilSend is reported by Resubscriber.Run when it is given no send function.
var errNilSend = errors.New("shardcast: resubscribe: nil send function")

// Group is a set of channels that may share one subscribe command: for the
// cluster engine the channels of one partition (all in one hash slot), for
// the sharded engine the channels of one connection (Key is the shard index,
// or -1).
type Group struct {
	// Key identifies the group to the engine (a partition or a shard
	// index); Resubscriber reports failed groups by it.
	Key int
	// Channels are the wire names to subscribe, in the order to send them.
	Channels []string
}

// GroupByPartition splits channels into one Group per distinct
// partitionOf(channel), sorted by Key. Within a group, channels keep the
// order they had in channels; duplicates are kept. partitionOf is called
// exactly once per channel. The groups' Channels share one backing array
// (each capped at its own length, so appending to one group cannot
// overwrite another). It returns nil for no channels.
func GroupByPartition(channels []string, partitionOf func(string) int) []Group {
	if len(channels) == 0 {
		return nil
	}
	// First pass: number the distinct keys in order of first sight, so the
	// second pass indexes slices instead of hashing every key again.
	slot := make([]int, len(channels)) // channel → its key's number
	number := make(map[int]int)        // key → number
	var keys, counts []int             // by number
	for i, ch := range channels {
		k := partitionOf(ch)
		n, ok := number[k]
		if !ok {
			n = len(keys)
			number[k] = n
			keys = append(keys, k)
			counts = append(counts, 0)
		}
		slot[i] = n
		counts[n]++
	}

	order := make([]int, len(keys)) // sorted position → number
	for n := range order {
		order[n] = n
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })

	// A counting sort: lay the groups out back to back in one array in key
	// order, then fill each in input order. That keeps the order within a
	// group without a stable sort, with one allocation for all channels.
	backing := make([]string, len(channels))
	groups := make([]Group, len(keys))
	next := make([]int, len(keys)) // by number: next free index in backing
	offset := 0
	for pos, n := range order {
		end := offset + counts[n]
		groups[pos] = Group{Key: keys[n], Channels: backing[offset:end:end]}
		next[n] = offset
		offset = end
	}
	for i, ch := range channels {
		n := slot[i]
		backing[next[n]] = ch
		next[n]++
	}
	return groups
}

// Batches cuts g into ceil(len(g.Channels)/batch) groups of g.Key with at
// most batch channels each, one subscribe command apiece, in order; every command but the last is full. A batch of
// zero or less means DefaultSubscribeBatch. The commands' Channels are
// sub-slices of g.Channels (no copy; each capped at its own length). It
// returns nil for a group without channels.
func (g Group) Batches(batch int) []Group {
	if batch <= 0 {
		batch = DefaultSubscribeBatch
	}
	n := len(g.Channels)
	if n == 0 {
		return nil
	}
	cmds := make([]Group, 0, (n+batch-1)/batch)
	for start := 0; start < n; start += batch {
		end := min(start+batch, n)
		cmds = append(cmds, Group{Key: g.Key, Channels: g.Channels[start:end:end]})
	}
	return cmds
}

// Resubscriber sends the subscribe commands for a set of groups with bounded
// concurrency. Its zero value is ready to use.
//
// A group is the unit of work: one goroutine sends all of a group's
// commands, in order, and no group is ever split across goroutines. Split
// by channel instead, every worker would hold a slice of every partition and
// send a command per partition it holds: workers × partitions commands
// (16 × 21 = 336) instead of one per partition (21).
type Resubscriber struct {
	// Workers is the most groups sent at once (default 16).
	Workers int
	// Batch is the most channels in one command (default
	// DefaultSubscribeBatch).
	Batch int
}

// ResubscribeReport tells what a Run did.
type ResubscribeReport struct {
	// Groups is the number of groups Run was given.
	Groups int
	// Commands is the number of commands passed to send, failed ones
	// included.
	Commands int
	// Channels is the number of channels in commands send confirmed.
	Channels int
	// Failures is the number of groups not fully confirmed: a command
	// failed, or ctx ended before the group was done.
	Failures int
	// FailedKeys lists the Key of each failed group, ascending.
	FailedKeys []int
	// Err is the failure of the first failed group in input order, wrapped
	// with its key; nil when every group succeeded.
	Err error
	// Duration is the wall time Run took.
	Duration time.Duration
}

// Run sends every group's commands through send, with at most r.Workers
// groups in flight, and returns once every goroutine it started has exited.
// send returns once Redis confirmed every channel of cmd, or with the
// reason it could not; it must honour ctx.
//
// A group whose command fails is abandoned at that command (its remaining
// commands are not sent) and counted as failed; other groups go on. When
// ctx ends, groups not yet started are counted as failed without calling
// send, and a group in progress stops before its next command; send is
// expected to return promptly on its own. Subscribing is idempotent in
// Redis, so a caller can retry the failed groups whole.
//
// No groups gives a zero report.
func (r Resubscriber) Run(ctx context.Context, groups []Group, send func(ctx context.Context, cmd Group) error) ResubscribeReport {
	var many func(ctx context.Context, cmds []Group) []error
	if send != nil {
		many = func(ctx context.Context, cmds []Group) []error { return []error{send(ctx, cmds[0])} }
	}
	bounds := make([]int, len(groups)+1)
	for i := range bounds {
		bounds[i] = i
	}
	return r.run(ctx, groups, bounds, many)
}

// RunPacked is Run for a send that carries several commands in one write
// and returns one error per command, in order. Consecutive groups whose
// channels together fit in one Batch go to a single send call, one
// command per group; a larger group goes alone and is sent as Run sends
// it, one command per call. After a reconnect a node's partitions hold a
// few channels each, and one write for many of them saves a system call,
// a deadline and a wake-up per partition, while Redis still gets one
// subscribe command per partition. A failed command fails its group
// only; ctx ending fails every group of a call not yet made.
func (r Resubscriber) RunPacked(ctx context.Context, groups []Group, send func(ctx context.Context, cmds []Group) []error) ResubscribeReport {
	return r.run(ctx, groups, r.packs(groups), send)
}

// packs returns the bounds of RunPacked's calls: call k sends
// groups[bounds[k]:bounds[k+1]].
func (r Resubscriber) packs(groups []Group) []int {
	batch := r.Batch
	if batch <= 0 {
		batch = DefaultSubscribeBatch
	}
	bounds := []int{0}
	size := 0
	for i, g := range groups {
		n := len(g.Channels)
		fits := n > 0 && n <= batch
		if i > bounds[len(bounds)-1] && (!fits || size+n > batch || size == 0) {
			bounds = append(bounds, i)
			size = 0
		}
		if fits {
			size += n
		}
	}
	return append(bounds, len(groups))
}

// run sends the calls bounds cuts groups into with at most r.Workers in
// flight: a call of one group sends that group's commands one after
// another, a call of several sends their one command each at once.
func (r Resubscriber) run(ctx context.Context, groups []Group, bounds []int, send func(ctx context.Context, cmds []Group) []error) ResubscribeReport {
	if len(groups) == 0 {
		return ResubscribeReport{}
	}
	start := time.Now()
	calls := len(bounds) - 1
	workers := r.Workers
	if workers <= 0 {
		workers = defaultResubscribeWorkers
	}
	workers = min(workers, calls)

	// One slot per group, each written by exactly one goroutine; the
	// report is assembled after they all exit, so no lock is needed.
	results := make([]groupResult, len(groups))
	if send == nil {
		for i := range results {
			results[i].err = errNilSend
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					k := int(next.Add(1) - 1)
					if k >= calls {
						return
					}
					a, b := bounds[k], bounds[k+1]
					switch {
					case ctx.Err() != nil:
						for i := a; i < b; i++ {
							results[i].err = ctx.Err()
						}
					case b-a == 1:
						results[a] = r.sendGroup(ctx, groups[a], send)
					default:
						sendPack(ctx, groups[a:b], results[a:b], send)
					}
				}
			})
		}
		wg.Wait()
	}

	rep := ResubscribeReport{Groups: len(groups)}
	for i, res := range results {
		rep.Commands += res.commands
		rep.Channels += res.channels
		if res.err == nil {
			continue
		}
		rep.Failures++
		rep.FailedKeys = append(rep.FailedKeys, groups[i].Key)
		if rep.Err == nil {
			rep.Err = fmt.Errorf("shardcast: subscribe group %d: %w", groups[i].Key, res.err)
		}
	}
	slices.Sort(rep.FailedKeys)
	rep.Duration = time.Since(start)
	return rep
}

// sendPack sends groups, one command each, in one call and records each
// group's outcome in the result of the same index.
func sendPack(ctx context.Context, groups []Group, results []groupResult, send func(ctx context.Context, cmds []Group) []error) {
	errs := send(ctx, groups)
	for i, g := range groups {
		results[i].commands = 1
		switch {
		case len(errs) != len(groups):
			results[i].err = errCount(len(errs), len(groups))
		case errs[i] != nil:
			results[i].err = errs[i]
		default:
			results[i].channels = len(g.Channels)
		}
	}
}

// sendOne sends cmd alone through a send that takes several.
func sendOne(ctx context.Context, cmd Group, send func(ctx context.Context, cmds []Group) []error) error {
	errs := send(ctx, []Group{cmd})
	if len(errs) != 1 {
		return errCount(len(errs), 1)
	}
	return errs[0]
}

// errCount is the failure of a send that did not return one error per
// command.
func errCount(got, want int) error {
	return fmt.Errorf("shardcast: resubscribe: send returned %d errors for %d commands", got, want)
}

// groupResult is what sending one group did.
type groupResult struct {
	commands int
	channels int
	err      error
}

func (r Resubscriber) sendGroup(ctx context.Context, g Group, send func(ctx context.Context, cmds []Group) []error) groupResult {
	var res groupResult
	for _, cmd := range g.Batches(r.Batch) {
		if err := ctx.Err(); err != nil {
			res.err = err
			return res
		}
		res.commands++
		if err := sendOne(ctx, cmd, send); err != nil {
			res.err = err
			return res
		}
		res.channels += len(cmd.Channels)
	}
	return res
}
