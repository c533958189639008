package shardcast

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// resubTestChannels builds partitions × perPartition channels, listed
// partition after partition, and the lookup from channel to partition.
func resubTestChannels(partitions, perPartition int) ([]string, func(string) int) {
	channels := make([]string, 0, partitions*perPartition)
	partOf := make(map[string]int, partitions*perPartition)
	for p := range partitions {
		for c := range perPartition {
			name := fmt.Sprintf("p%02d-c%04d", p, c)
			channels = append(channels, name)
			partOf[name] = p
		}
	}
	return channels, func(ch string) int { return partOf[ch] }
}

// resubNaiveCommandCount is the plan Run avoids: deal the channels out to
// the workers one by one, and let each worker batch its share by partition.
func resubNaiveCommandCount(channels []string, partitionOf func(string) int, workers, batch int) int {
	shares := make([][]string, workers)
	for i, ch := range channels {
		shares[i%workers] = append(shares[i%workers], ch)
	}
	n := 0
	for _, share := range shares {
		for _, g := range GroupByPartition(share, partitionOf) {
			n += len(g.Batches(batch))
		}
	}
	return n
}

// resubRecorder is a send function that records every command it is given.
type resubRecorder struct {
	mu   sync.Mutex
	cmds []Group
}

func (r *resubRecorder) send(_ context.Context, cmd Group) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, cmd)
	return nil
}

// resubRun runs r in a goroutine and fails the test if it does not return.
func resubRun(t *testing.T, ctx context.Context, r Resubscriber, groups []Group, send func(ctx context.Context, cmd Group) error) ResubscribeReport {
	t.Helper()
	done := make(chan ResubscribeReport, 1)
	go func() { done <- r.Run(ctx, groups, send) }()
	select {
	case rep := <-done:
		return rep
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return ResubscribeReport{}
	}
}

func TestGroupByPartitionSortsByKeyAndKeepsOrder(t *testing.T) {
	keyOf := map[byte]int{'a': 5, 'b': -1, 'c': 2}
	calls := 0
	partitionOf := func(ch string) int {
		calls++
		return keyOf[ch[0]]
	}
	channels := []string{"a1", "b1", "a2", "c1", "b2", "a3", "a1"}
	groups := GroupByPartition(channels, partitionOf)

	assert.Equal(t, []Group{
		{Key: -1, Channels: []string{"b1", "b2"}},
		{Key: 2, Channels: []string{"c1"}},
		{Key: 5, Channels: []string{"a1", "a2", "a3", "a1"}},
	}, groups)
	assert.Equal(t, len(channels), calls, "partitionOf is called once per channel")

	// Groups share one array but are capped: growing one cannot overwrite
	// its neighbour.
	_ = append(groups[0].Channels, "intruder")
	assert.Equal(t, "c1", groups[1].Channels[0])

	assert.Nil(t, GroupByPartition(nil, partitionOf))
	assert.Nil(t, GroupByPartition([]string{}, partitionOf))
}

func TestGroupByPartitionManyPartitions(t *testing.T) {
	const partitions = 128
	channels := make([]string, 10000)
	for i := range channels {
		channels[i] = fmt.Sprintf("ch-%d", i)
	}
	partitionOf := func(ch string) int { return int(xxhash.Sum64String(ch) % partitions) }
	groups := GroupByPartition(channels, partitionOf)
	position := make(map[string]int, len(channels))
	for i, ch := range channels {
		position[ch] = i
	}

	require.Len(t, groups, partitions)
	total := 0
	for i, g := range groups {
		assert.Equal(t, i, g.Key, "sorted by key")
		prev := -1
		for _, ch := range g.Channels {
			require.Equal(t, g.Key, partitionOf(ch))
			idx := position[ch]
			require.Greater(t, idx, prev, "input order kept within a group")
			prev = idx
		}
		total += len(g.Channels)
	}
	assert.Equal(t, len(channels), total)
}

func TestGroupBatches(t *testing.T) {
	channels, _ := resubTestChannels(1, 2000)
	g := Group{Key: 9, Channels: channels}

	cmds := g.Batches(512)
	require.Len(t, cmds, 4)
	var sizes []int
	var joined []string
	for i, c := range cmds {
		assert.Equal(t, 9, c.Key)
		sizes = append(sizes, len(c.Channels))
		joined = append(joined, c.Channels...)
		assert.Same(t, &g.Channels[i*512], &c.Channels[0], "commands share the group's array")
		assert.Equal(t, len(c.Channels), cap(c.Channels), "capped so an append cannot spill into the next command")
	}
	assert.Equal(t, []int{512, 512, 512, 464}, sizes)
	assert.Equal(t, channels, joined, "every channel once, in order")

	cases := []struct {
		name  string
		n     int
		batch int
		want  []int
	}{
		{"default batch for zero", 1300, 0, []int{512, 512, 276}},
		{"default batch for negative", 513, -3, []int{512, 1}},
		{"exact multiple", 1024, 512, []int{512, 512}},
		{"smaller than a batch", 3, 512, []int{3}},
		{"batch of one", 3, 1, []int{1, 1, 1}},
		{"empty", 0, 512, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chs, _ := resubTestChannels(1, tc.n)
			var got []int
			for _, c := range (Group{Key: 1, Channels: chs}).Batches(tc.batch) {
				got = append(got, len(c.Channels))
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestResubscriberSendsWholePartitions(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const partitions, workers = 21, 16
	cases := []struct {
		perPartition int
		naive        int // commands when channels, not partitions, are dealt to workers
	}{
		// 10 channels per partition reach only 10 of the 16 workers.
		{perPartition: 10, naive: partitions * 10},
		// From 16 channels per partition on, every worker holds a piece of
		// every partition: workers × partitions.
		{perPartition: 100, naive: workers * partitions},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%dx%d", partitions, tc.perPartition), func(t *testing.T) {
			channels, partitionOf := resubTestChannels(partitions, tc.perPartition)
			assert.Equal(t, tc.naive, resubNaiveCommandCount(channels, partitionOf, workers, DefaultSubscribeBatch))

			groups := GroupByPartition(channels, partitionOf)
			rec := &resubRecorder{}
			rep := resubRun(t, context.Background(), Resubscriber{Workers: workers}, groups, rec.send)

			require.NoError(t, rep.Err)
			assert.Equal(t, partitions, rep.Groups)
			assert.Equal(t, partitions, rep.Commands, "one command per partition")
			assert.Equal(t, len(channels), rep.Channels)
			assert.Zero(t, rep.Failures)
			assert.Empty(t, rep.FailedKeys)
			assert.Positive(t, rep.Duration)

			require.Len(t, rec.cmds, partitions)
			seen := map[int]bool{}
			for _, c := range rec.cmds {
				assert.False(t, seen[c.Key], "partition %d sent twice", c.Key)
				seen[c.Key] = true
				require.Len(t, c.Channels, tc.perPartition)
				for _, ch := range c.Channels {
					require.Equal(t, c.Key, partitionOf(ch), "a command mixes partitions")
				}
			}
		})
	}
}

func TestResubscriberDefaultBatch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	channels, partitionOf := resubTestChannels(1, 2000)
	rec := &resubRecorder{}
	rep := resubRun(t, context.Background(), Resubscriber{}, GroupByPartition(channels, partitionOf), rec.send)
	require.NoError(t, rep.Err)
	var sizes []int
	for _, c := range rec.cmds {
		sizes = append(sizes, len(c.Channels))
	}
	assert.Equal(t, []int{512, 512, 512, 464}, sizes, "one worker sends a group's commands in order")
	assert.Equal(t, 4, rep.Commands)
	assert.Equal(t, 2000, rep.Channels)
}

func TestResubscriberConcurrencyReachesButNeverExceedsWorkers(t *testing.T) {
	cases := []struct {
		name    string
		workers int
		groups  int
		want    int
	}{
		{"explicit", 4, 40, 4},
		{"default", 0, 40, defaultResubscribeWorkers},
		{"more workers than groups", 50, 5, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

			channels, partitionOf := resubTestChannels(tc.groups, 3)
			var inFlight, peak atomic.Int64
			allIn := make(chan struct{})
			var once sync.Once
			send := func(ctx context.Context, _ Group) error {
				defer inFlight.Add(-1)
				n := inFlight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				if n == int64(tc.want) {
					once.Do(func() { close(allIn) })
				}
				// Hold every call until the expected number run at once: if
				// Run used fewer goroutines, this fails instead of passing.
				select {
				case <-allIn:
					return nil
				case <-time.After(10 * time.Second):
					return errors.New("expected concurrency never reached")
				}
			}
			rep := resubRun(t, context.Background(), Resubscriber{Workers: tc.workers}, GroupByPartition(channels, partitionOf), send)
			require.NoError(t, rep.Err)
			assert.Equal(t, int64(tc.want), peak.Load())
			assert.Equal(t, tc.groups, rep.Commands)
		})
	}
}

func TestResubscriberKeepsGroupOrderAndNeverSplitsAGroup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const groupsN, perGroup, batch = 30, 10, 2
	channels, partitionOf := resubTestChannels(groupsN, perGroup)
	groups := GroupByPartition(channels, partitionOf)

	inFlight := make([]atomic.Int32, groupsN)
	nextIdx := make([]atomic.Int32, groupsN)
	var overlaps, outOfOrder atomic.Int32
	send := func(_ context.Context, cmd Group) error {
		if !inFlight[cmd.Key].CompareAndSwap(0, 1) {
			overlaps.Add(1)
		}
		defer inFlight[cmd.Key].Store(0)
		idx := nextIdx[cmd.Key].Load()
		if cmd.Channels[0] != groups[cmd.Key].Channels[idx*batch] {
			outOfOrder.Add(1)
		}
		nextIdx[cmd.Key].Store(idx + 1)
		return nil
	}
	rep := resubRun(t, context.Background(), Resubscriber{Workers: 8, Batch: batch}, groups, send)
	require.NoError(t, rep.Err)
	assert.Equal(t, groupsN*perGroup/batch, rep.Commands)
	assert.Zero(t, overlaps.Load(), "two commands of one group ran at once")
	assert.Zero(t, outOfOrder.Load(), "a group's commands went out of order")
	for k := range nextIdx {
		assert.Equal(t, int32(perGroup/batch), nextIdx[k].Load())
	}
}

func TestResubscriberReportsFailedGroupAndFinishesOthers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	errBoom := errors.New("boom")
	channels, partitionOf := resubTestChannels(21, 10)
	var mu sync.Mutex
	sent := map[int]int{}
	send := func(_ context.Context, cmd Group) error {
		mu.Lock()
		defer mu.Unlock()
		sent[cmd.Key]++
		if cmd.Key == 7 && sent[cmd.Key] == 2 {
			return errBoom
		}
		return nil
	}
	// Batch 4 gives every group 3 commands; group 7 fails on its second.
	rep := resubRun(t, context.Background(), Resubscriber{Workers: 4, Batch: 4}, GroupByPartition(channels, partitionOf), send)

	assert.Equal(t, 21, rep.Groups)
	assert.Equal(t, 1, rep.Failures)
	assert.Equal(t, []int{7}, rep.FailedKeys)
	require.Error(t, rep.Err)
	assert.ErrorIs(t, rep.Err, errBoom)
	assert.Contains(t, rep.Err.Error(), "group 7")
	assert.Equal(t, 20*3+2, rep.Commands, "group 7 stops at its failed command")
	assert.Equal(t, 20*10+4, rep.Channels, "only confirmed channels count")
	for k := range 21 {
		if k == 7 {
			assert.Equal(t, 2, sent[k])
		} else {
			assert.Equal(t, 3, sent[k], "group %d", k)
		}
	}
}

func TestResubscriberFirstErrorInInputOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	groups := []Group{{Key: 3, Channels: []string{"a"}}, {Key: 1, Channels: []string{"b"}}, {Key: 2, Channels: []string{"c"}}}
	send := func(_ context.Context, cmd Group) error {
		if cmd.Key != 2 {
			return fmt.Errorf("refused %d", cmd.Key)
		}
		return nil
	}
	rep := resubRun(t, context.Background(), Resubscriber{Workers: 3}, groups, send)
	assert.Equal(t, []int{1, 3}, rep.FailedKeys, "sorted")
	require.Error(t, rep.Err)
	assert.Contains(t, rep.Err.Error(), "group 3: refused 3", "the first failed group of the input")
}

func TestResubscriberStopsPromptlyOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const workers, groupsN = 4, 100
	channels, partitionOf := resubTestChannels(groupsN, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var inFlight, calls atomic.Int64
	allIn := make(chan struct{})
	var once sync.Once
	send := func(ctx context.Context, _ Group) error {
		calls.Add(1)
		if inFlight.Add(1) == workers {
			once.Do(func() { close(allIn) })
		}
		<-ctx.Done() // a send that only returns when told to
		return ctx.Err()
	}
	go func() {
		<-allIn
		cancel()
	}()
	rep := resubRun(t, ctx, Resubscriber{Workers: workers}, GroupByPartition(channels, partitionOf), send)

	assert.Equal(t, int64(workers), calls.Load(), "no group is started after the cancel")
	assert.Equal(t, groupsN, rep.Groups)
	assert.Equal(t, groupsN, rep.Failures, "unstarted groups count as failed")
	assert.Len(t, rep.FailedKeys, groupsN)
	assert.Equal(t, workers, rep.Commands)
	assert.Zero(t, rep.Channels)
	assert.ErrorIs(t, rep.Err, context.Canceled)
}

func TestResubscriberCancelMidRunSkipsTheRest(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const workers, groupsN, cancelAt = 2, 50, 3
	channels, partitionOf := resubTestChannels(groupsN, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Counting and cancelling under one lock makes "the third call cancels"
	// exact: no other call can be counted between the two.
	var mu sync.Mutex
	calls := 0
	send := func(context.Context, Group) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == cancelAt {
			cancel()
		}
		return nil
	}
	rep := resubRun(t, ctx, Resubscriber{Workers: workers}, GroupByPartition(channels, partitionOf), send)

	// Besides the cancelling worker, each other worker may have checked ctx
	// just before the cancel and still send one command.
	assert.LessOrEqual(t, calls, cancelAt+workers-1)
	assert.Equal(t, calls, rep.Commands)
	assert.Equal(t, groupsN-calls, rep.Failures)
	assert.ErrorIs(t, rep.Err, context.Canceled)
}

func TestResubscriberEmptyAndNilInputs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	called := false
	send := func(context.Context, Group) error { called = true; return nil }
	assert.Equal(t, ResubscribeReport{}, Resubscriber{}.Run(context.Background(), nil, send))
	assert.Equal(t, ResubscribeReport{}, Resubscriber{Workers: 3}.Run(context.Background(), []Group{}, send))
	assert.False(t, called)

	rep := Resubscriber{}.Run(context.Background(), []Group{{Key: 4, Channels: []string{"a"}}, {Key: 2}}, nil)
	assert.Equal(t, 2, rep.Failures)
	assert.Equal(t, []int{2, 4}, rep.FailedKeys)
	assert.ErrorIs(t, rep.Err, errNilSend)

	// A group without channels has nothing to send and succeeds.
	rep = Resubscriber{}.Run(context.Background(), []Group{{Key: 1}}, send)
	assert.False(t, called)
	assert.NoError(t, rep.Err)
	assert.Equal(t, 1, rep.Groups)
	assert.Zero(t, rep.Commands)
}

func BenchmarkPlanResubscribe(b *testing.B) {
	const channelsN, partitions = 100000, 128
	channels := make([]string, channelsN)
	for i := range channels {
		channels[i] = fmt.Sprintf("user:%d:notifications", i)
	}
	partitionOf := func(ch string) int { return int(xxhash.Sum64String(ch) % partitions) }
	b.ReportAllocs()
	commands := 0
	for b.Loop() {
		commands = 0
		for _, g := range GroupByPartition(channels, partitionOf) {
			commands += len(g.Batches(DefaultSubscribeBatch))
		}
	}
	b.ReportMetric(float64(commands), "commands")
}
