package shardcast

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// packRecorder is a RunPacked send that records each call's commands and
// fails the commands of the groups in fail.
type packRecorder struct {
	mu    sync.Mutex
	calls [][]Group
	fail  map[int]error
}

func (r *packRecorder) send(_ context.Context, cmds []Group) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, cmds)
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		errs[i] = r.fail[c.Key]
	}
	return errs
}

// packGroups returns one group per size, keyed by its index, with
// channels named after the key.
func packGroups(sizes ...int) []Group {
	gs := make([]Group, len(sizes))
	for k, n := range sizes {
		gs[k].Key = k
		for c := range n {
			gs[k].Channels = append(gs[k].Channels, fmt.Sprintf("g%d-%d", k, c))
		}
	}
	return gs
}

// keysOf returns, per call, the keys of its commands.
func keysOf(calls [][]Group) [][]int {
	out := make([][]int, len(calls))
	for i, cmds := range calls {
		for _, c := range cmds {
			out[i] = append(out[i], c.Key)
		}
	}
	return out
}

// TestRunPackedPacksSmallGroupsUpToABatch: consecutive groups share a call
// while their channels fit in one Batch, one command each; a group larger
// than Batch goes alone, one command per call, as Run sends it.
func TestRunPackedPacksSmallGroupsUpToABatch(t *testing.T) {
	groups := packGroups(4, 4, 4, 12, 3, 10, 2)
	rec := &packRecorder{}
	rep := Resubscriber{Workers: 1, Batch: 10}.RunPacked(context.Background(), groups, rec.send)

	assert.Equal(t, [][]int{{0, 1}, {2}, {3}, {3}, {4}, {5}, {6}}, keysOf(rec.calls))
	assert.Equal(t, groups[3].Channels[:10], rec.calls[2][0].Channels, "the large group's first command is a full batch")
	assert.Equal(t, groups[3].Channels[10:], rec.calls[3][0].Channels)
	assert.Equal(t, groups[0].Channels, rec.calls[0][0].Channels, "a packed group is one command of all its channels")
	assert.Equal(t, ResubscribeReport{Groups: 7, Commands: 8, Channels: 39}, withoutDuration(rep))
}

// TestRunPackedFailsOnlyTheFailedCommandsGroup: a command that fails in a
// packed call fails its own group; the call's other groups succeed.
func TestRunPackedFailsOnlyTheFailedCommandsGroup(t *testing.T) {
	boom := errors.New("boom")
	groups := packGroups(2, 2, 2)
	rec := &packRecorder{fail: map[int]error{1: boom}}
	rep := Resubscriber{Workers: 1, Batch: 10}.RunPacked(context.Background(), groups, rec.send)

	require.Equal(t, [][]int{{0, 1, 2}}, keysOf(rec.calls))
	assert.Equal(t, 3, rep.Commands)
	assert.Equal(t, 4, rep.Channels, "the failed group's channels are not counted")
	assert.Equal(t, []int{1}, rep.FailedKeys)
	assert.ErrorIs(t, rep.Err, boom)
}

// TestRunPackedWrongErrorCountFailsTheCall: a send that does not return
// one error per command fails every group of that call, never counts
// them as confirmed.
func TestRunPackedWrongErrorCountFailsTheCall(t *testing.T) {
	groups := packGroups(2, 2, 20)
	send := func(_ context.Context, cmds []Group) []error {
		if len(cmds) > 1 {
			return nil
		}
		return []error{nil, nil}
	}
	rep := Resubscriber{Workers: 1, Batch: 10}.RunPacked(context.Background(), groups, send)

	assert.Equal(t, []int{0, 1, 2}, rep.FailedKeys)
	assert.Zero(t, rep.Channels)
	assert.ErrorContains(t, rep.Err, "send returned 0 errors for 2 commands")
}

// TestRunPackedCancelledSendsNothing: with ctx already ended, no call is
// made and every group fails with ctx's error.
func TestRunPackedCancelledSendsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := &packRecorder{}
	rep := Resubscriber{Batch: 10}.RunPacked(ctx, packGroups(2, 2, 30, 1), rec.send)

	assert.Empty(t, rec.calls)
	assert.Equal(t, []int{0, 1, 2, 3}, rep.FailedKeys)
	assert.ErrorIs(t, rep.Err, context.Canceled)
}

// TestRunPackedEmptyGroupGoesAlone: a group without channels sends no
// command and does not join a pack.
func TestRunPackedEmptyGroupGoesAlone(t *testing.T) {
	rec := &packRecorder{}
	rep := Resubscriber{Workers: 1, Batch: 10}.RunPacked(context.Background(), packGroups(2, 0, 2, 2), rec.send)

	assert.Equal(t, [][]int{{0}, {2, 3}}, keysOf(rec.calls))
	assert.Equal(t, ResubscribeReport{Groups: 4, Commands: 3, Channels: 6}, withoutDuration(rep))
}

func withoutDuration(r ResubscribeReport) ResubscribeReport {
	r.Duration = 0
	return r
}
