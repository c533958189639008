package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/shardcast/shardcast"
)

// rec builds a channel record whose publish i (seq i+1) ran from
// t0+i ms to t0+i ms+100 µs.
func rec(name string, published int, failed []int, recv ...uint32) channelRecord {
	c := channelRecord{Name: name, Failed: make([]bool, published)}
	for i := range published {
		at := t0.Add(time.Duration(i) * time.Millisecond).UnixNano()
		c.Start = append(c.Start, at)
		c.End = append(c.End, at+int64(100*time.Microsecond))
	}
	for _, s := range failed {
		c.Failed[s-1] = true
	}
	c.Recv = recv
	return c
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func TestCheck(t *testing.T) {
	restored := func(since, until int, chans []string, parts []int, shard string) shardcast.Event {
		return shardcast.Event{Kind: shardcast.EventRestored, Since: ms(since), Until: ms(until), Channels: chans, Partitions: parts, Shard: shard}
	}
	partOf := func(ch string) int { return int(ch[0] - 'a') }
	tests := []struct {
		name   string
		chans  []channelRecord
		events []shardcast.Event
		want   report
	}{
		{"all delivered", []channelRecord{rec("a", 3, nil, 1, 2, 3)}, nil,
			report{Accepted: 3, Delivered: 3}},
		{"duplicate", []channelRecord{rec("a", 2, nil, 1, 1, 2)}, nil,
			report{Accepted: 2, Delivered: 2, Duplicates: 1}},
		{"reorder", []channelRecord{rec("a", 2, nil, 2, 1)}, nil,
			report{Accepted: 2, Delivered: 2, Reordered: 1}},
		{"failed publish late is allowed", []channelRecord{rec("a", 3, []int{1}, 2, 1, 3)}, nil,
			report{Accepted: 2, Delivered: 2, Failed: 1, FailedDelivered: 1, LateFailed: 1}},
		{"failed publish lost is not a loss", []channelRecord{rec("a", 2, []int{1}, 2)}, nil,
			report{Accepted: 1, Delivered: 1, Failed: 1}},
		{"silent loss", []channelRecord{rec("a", 3, nil, 1, 3)}, nil,
			report{Accepted: 3, Delivered: 2, Lost: 1, LostSilent: 1}},
		{"loss in a window naming the channel", []channelRecord{rec("a", 3, nil, 1, 3)},
			[]shardcast.Event{restored(1, 1, []string{"a"}, nil, "")},
			report{Accepted: 3, Delivered: 2, Lost: 1, LostReported: 1, Restored: 1}},
		{"loss in a window of another channel", []channelRecord{rec("a", 3, nil, 1, 3)},
			[]shardcast.Event{restored(0, 5, []string{"b"}, nil, "")},
			report{Accepted: 3, Delivered: 2, Lost: 1, LostSilent: 1, Restored: 1, LongestWindow: 5 * time.Millisecond}},
		{"loss in a window naming the partition", []channelRecord{rec("a", 3, nil, 1, 3)},
			[]shardcast.Event{restored(1, 2, nil, []int{0}, "x")},
			report{Accepted: 3, Delivered: 2, Lost: 1, LostReported: 1, Restored: 1, LongestWindow: time.Millisecond}},
		{"loss just before the window, within tolerance", []channelRecord{rec("a", 3, nil, 1, 3)},
			[]shardcast.Event{restored(3, 4, []string{"a"}, nil, "")},
			report{Accepted: 3, Delivered: 2, Lost: 1, LostReported: 1, LostTolerance: 1, Restored: 1, LongestWindow: time.Millisecond}},
		{"loss well before the window", []channelRecord{rec("a", 3, nil, 1, 3)},
			[]shardcast.Event{restored(500, 600, []string{"a"}, nil, "")},
			report{Accepted: 3, Delivered: 2, Lost: 1, LostSilent: 1, Restored: 1, LongestWindow: 100 * time.Millisecond}},
		{"truncated drop report covers every channel", []channelRecord{rec("a", 3, nil, 1, 3)},
			[]shardcast.Event{{Kind: shardcast.EventDropped, Since: ms(0), Until: ms(3), Count: 7, Channels: []string{"b"}, Truncated: true}},
			report{Accepted: 3, Delivered: 2, Lost: 1, LostReported: 1, DroppedEvents: 1, DroppedCount: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(tt.chans, tt.events, where{Partition: partOf}, 2*time.Millisecond)
			got.Samples = nil
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want.Duplicates+tt.want.Reordered+tt.want.LostSilent > 0, got.bad())
		})
	}
}

func TestCheckShard(t *testing.T) {
	ev := shardcast.Event{Kind: shardcast.EventRestored, Shard: "s1", Since: ms(0), Until: ms(5)}
	in := where{Shards: func(ch string) []string { return map[string][]string{"a": {"s1"}, "b": {"s2"}}[ch] }}
	got := check([]channelRecord{rec("a", 2, nil, 2), rec("b", 2, nil, 2)}, []shardcast.Event{ev}, in, 0)
	assert.Equal(t, 2, got.Lost)
	assert.Equal(t, 1, got.LostReported, "the event names shard s1, which holds a")
	assert.Equal(t, 1, got.LostSilent)
}

func TestSelectFaults(t *testing.T) {
	got, err := selectFaults("sharded", "kill, moveslot,pause")
	assert.NoError(t, err)
	assert.Equal(t, []string{"kill", "pause"}, got)
	_, err = selectFaults("cluster", "nope")
	assert.Error(t, err)
	_, err = selectFaults("sharded", "moveslot")
	assert.Error(t, err)
	got, err = selectFaults("cluster", "")
	assert.NoError(t, err)
	assert.Equal(t, clusterFaultNames, got)
}

// TestCheckUnrestored: a channel whose last EventInterrupted no
// EventRestored followed fails the run; one restored later does not.
func TestCheckUnrestored(t *testing.T) {
	evs := []shardcast.Event{
		{Kind: shardcast.EventInterrupted, Since: ms(0), Channels: []string{"a", "b"}},
		{Kind: shardcast.EventRestored, Since: ms(0), Until: ms(1), Channels: []string{"a"}},
	}
	chans := []channelRecord{{Name: "a"}, {Name: "b"}}
	r := check(chans, evs, where{}, 0)
	assert.Equal(t, 1, r.Unrestored)
	assert.True(t, r.bad())
	evs = append(evs, shardcast.Event{Kind: shardcast.EventRestored, Since: ms(0), Until: ms(2), Channels: []string{"b"}})
	r = check(chans, evs, where{}, 0)
	assert.Zero(t, r.Unrestored)
	assert.False(t, r.bad())
	// A channel the soak does not publish (a re-layout's barrier) is the
	// engine's own.
	evs = append(evs, shardcast.Event{Kind: shardcast.EventInterrupted, Since: ms(3), Channels: []string{"barrier"}})
	assert.Zero(t, check(chans, evs, where{}, 0).Unrestored)
}
