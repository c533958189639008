package main

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/shardcast/shardcast"
)

// channelRecord is one channel's history as the check reads it: index
// seq-1 of start, end and failed describes publish seq; recv lists the
// delivered sequence numbers in delivery order.
type channelRecord struct {
	Name       string
	Start, End []int64
	Failed     []bool
	Recv       []uint32
	RecvAt     []int64
}

// where tells the check which partition and shards a channel belongs to,
// so that an event naming a partition or a shard covers its channels.
// Shards lists every shard the channel lived on during the run (more than
// one after an online re-layout). Either function may be nil.
type where struct {
	Partition func(channel string) int
	Shards    func(channel string) []string
}

// report is the outcome of one soak run.
type report struct {
	Accepted        int // publishes Redis acknowledged
	Failed          int // publishes that returned an error
	FailedDelivered int // of those, delivered anyway (at-most-once allows it)
	Delivered       int // acknowledged publishes delivered (once or more)
	Lost            int // acknowledged publishes never delivered
	LostReported    int // of those, published inside a reported window of their channel
	LostTolerance   int // of LostReported, inside only thanks to the tolerance
	LostSilent      int // lost outside every reported window
	Duplicates      int // deliveries of a sequence number already delivered
	Reordered       int // acknowledged publishes delivered after a later one
	LateFailed      int // failed publishes delivered after a later one (allowed)
	Unknown         int // deliveries of a number never published

	Interrupted, Restored, DroppedEvents int
	DroppedCount                         uint64
	// Unrestored counts the soak's channels an EventInterrupted named
	// last, with no EventRestored after it: reported lost, never reported
	// back.
	Unrestored    int
	LongestWindow time.Duration

	Samples []string // the first few offending deliveries or losses
}

// bad reports whether the run broke a promise: a duplicate, a reorder or a
// loss nobody was told about.
func (r report) bad() bool {
	return r.Duplicates > 0 || r.Reordered > 0 || r.LostSilent > 0 || r.Unrestored > 0
}

type window struct{ since, until int64 }

func (w window) covers(start, end, tol int64) bool {
	return end >= w.since-tol && start <= w.until+tol
}

// check compares what was published with what was delivered and matches
// every loss with the events: a lost message is reported when its Publish
// call overlaps, within tol, the Since..Until window of an EventRestored or
// EventDropped that names its channel, its partition, or (an event naming
// neither channels nor partitions) its shard.
func check(chans []channelRecord, events []shardcast.Event, in where, tol time.Duration) report {
	var r report
	byChan := make(map[string][]window)
	byPart := make(map[int][]window)
	byShard := make(map[string][]window)
	var everyChannel []window // truncated drop reports: channels unknown
	open := make(map[string]bool)
	for _, ev := range events {
		switch ev.Kind {
		case shardcast.EventInterrupted:
			r.Interrupted++
			for _, ch := range ev.Channels {
				open[ch] = true
			}
			continue
		case shardcast.EventRestored:
			r.Restored++
			for _, ch := range ev.Channels {
				delete(open, ch)
			}
			r.LongestWindow = max(r.LongestWindow, ev.Until.Sub(ev.Since))
		case shardcast.EventDropped:
			r.DroppedEvents++
			r.DroppedCount += ev.Count
		default:
			continue
		}
		w := window{ev.Since.UnixNano(), ev.Until.UnixNano()}
		if ev.Until.IsZero() {
			w.until = time.Now().UnixNano()
		}
		for _, ch := range ev.Channels {
			byChan[ch] = append(byChan[ch], w)
		}
		for _, p := range ev.Partitions {
			byPart[p] = append(byPart[p], w)
		}
		if len(ev.Channels) == 0 && len(ev.Partitions) == 0 && ev.Shard != "" {
			byShard[ev.Shard] = append(byShard[ev.Shard], w)
		}
		if ev.Kind == shardcast.EventDropped && ev.Truncated {
			everyChannel = append(everyChannel, w)
		}
	}
	sample := func(format string, args ...any) {
		if len(r.Samples) < 20 {
			r.Samples = append(r.Samples, fmt.Sprintf(format, args...))
		}
	}
	for _, c := range chans {
		ws := slices.Concat(byChan[c.Name], everyChannel)
		if in.Partition != nil {
			ws = append(ws, byPart[in.Partition(c.Name)]...)
		}
		if in.Shards != nil {
			for _, sh := range in.Shards(c.Name) {
				ws = append(ws, byShard[sh]...)
			}
		}
		seen := make([]bool, len(c.Start))
		firstAt := make([]int64, len(c.Start)) // when each number was first delivered
		var top uint32
		var topAt int64
		for k, s := range c.Recv {
			at := int64(0)
			if k < len(c.RecvAt) {
				at = c.RecvAt[k]
			}
			if int(s) > len(c.Start) {
				r.Unknown++
				sample("%s: #%d delivered, never published", c.Name, s)
				continue
			}
			switch {
			case seen[s-1]:
				r.Duplicates++
				sample("%s: #%d (published %s, failed %v) delivered twice: %s and %s", c.Name, s, span(c, s), c.Failed[s-1],
					time.Unix(0, firstAt[s-1]).Format(clock), time.Unix(0, at).Format(clock))
			case s < top && c.Failed[s-1]:
				r.LateFailed++
			case s < top:
				r.Reordered++
				sample("%s: #%d (published %s, delivered %s) delivered after #%d (published %s, failed %v, delivered %s)", c.Name, s,
					span(c, s), time.Unix(0, at).Format(clock), top, span(c, top), c.Failed[top-1], time.Unix(0, topAt).Format(clock))
			}
			if !seen[s-1] {
				firstAt[s-1] = at
			}
			seen[s-1] = true
			if s > top {
				top, topAt = s, at
			}
		}
		for i := range c.Start {
			if c.Failed[i] {
				r.Failed++
				if seen[i] {
					r.FailedDelivered++
				}
				continue
			}
			r.Accepted++
			if seen[i] {
				r.Delivered++
				continue
			}
			r.Lost++
			strict, loose := false, false
			var near window
			for _, w := range ws {
				if w.covers(c.Start[i], c.End[i], 0) {
					strict = true
					break
				}
				if w.covers(c.Start[i], c.End[i], int64(tol)) {
					loose, near = true, w
				}
			}
			switch {
			case strict:
				r.LostReported++
			case loose:
				r.LostReported++
				r.LostTolerance++
				if r.LostTolerance <= 3 {
					sample("%s: #%d lost, reported only within the tolerance: published %s, window %s..%s",
						c.Name, i+1, span(c, uint32(i+1)), time.Unix(0, near.since).Format(clock), time.Unix(0, near.until).Format(clock))
				}
			default:
				r.LostSilent++
				part := ""
				if in.Partition != nil {
					part = fmt.Sprintf(" partition %d", in.Partition(c.Name))
				}
				sample("%s%s: #%d lost outside every window (published %s..%s)", c.Name, part, i+1,
					time.Unix(0, c.Start[i]).Format(clock), time.Unix(0, c.End[i]).Format(clock))
			}
		}
	}
	// Only the soak's channels: a re-layout's barrier channel is the
	// engine's own, subscribed for a moment and unsubscribed interrupted.
	for ch := range open {
		if !slices.ContainsFunc(chans, func(c channelRecord) bool { return c.Name == ch }) {
			delete(open, ch)
		}
	}
	r.Unrestored = len(open)
	for _, ch := range head(slices.Sorted(maps.Keys(open)), 5) {
		sample("%s: reported interrupted, never restored", ch)
	}
	return r
}

// records copies the traffic's logs for check. Call it after the
// publishers halted.
func (t *traffic) records() []channelRecord {
	out := make([]channelRecord, len(t.logs))
	for i, l := range t.logs {
		l.mu.Lock()
		out[i] = channelRecord{Name: t.names[i], Start: slices.Clone(l.start), End: slices.Clone(l.end),
			Failed: slices.Clone(l.failed), Recv: slices.Clone(l.recv), RecvAt: slices.Clone(l.recvAt)}
		l.mu.Unlock()
	}
	return out
}

// span renders when publish seq of c ran.
func span(c channelRecord, seq uint32) string {
	return time.Unix(0, c.Start[seq-1]).Format(clock) + ".." + time.Unix(0, c.End[seq-1]).Format(clock)
}

// ackedWhileFrozen counts acknowledged publishes that started and ended
// while the master owning their partition (when it was paused) was frozen:
// that master cannot have run them, and a replica refuses SPUBLISH.
func ackedWhileFrozen(chans []channelRecord, spans []frozenSpan, partition func(string) int) (int, []string) {
	n := 0
	var samples []string
	margin := int64(5 * time.Millisecond)
	for _, f := range spans {
		owned := make(map[int]bool)
		for _, p := range f.parts {
			owned[p] = true
		}
		from, to := f.from.UnixNano()+margin, f.to.UnixNano()
		for _, c := range chans {
			if !owned[partition(c.Name)] {
				continue
			}
			for i := range c.Start {
				if !c.Failed[i] && c.Start[i] > from && c.End[i] < to {
					n++
					if len(samples) < 5 {
						samples = append(samples, fmt.Sprintf("%s: #%d acked %s while %s was frozen %s..%s",
							c.Name, i+1, span(c, uint32(i+1)), f.addr, f.from.Format(clock), f.to.Format(clock)))
					}
				}
			}
		}
	}
	return n, samples
}
