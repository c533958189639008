package engine

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTurnLock(t *testing.T) {
	turn, closing := NewTurn(), make(chan struct{})
	require.NoError(t, turn.Lock(context.Background(), closing))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, turn.Lock(ctx, closing), context.DeadlineExceeded, "a held turn waits, bounded by ctx")
	close(closing)
	assert.ErrorIs(t, turn.Lock(context.Background(), closing), shardcast.ErrClosed)
	turn.Unlock()
}

// TestTurnFinish: the caller gets its answer within its ctx while op keeps
// the turn until it is done, so the next holder comes after op.
func TestTurnFinish(t *testing.T) {
	var g Background
	turn, never := NewTurn(), make(chan struct{})

	require.NoError(t, turn.Lock(context.Background(), never))
	assert.ErrorIs(t, turn.Finish(context.Background(), &g, context.Background(), time.Minute,
		func(context.Context) error { return io.EOF }), io.EOF, "op's error reaches a patient caller")

	require.NoError(t, turn.Lock(context.Background(), never))
	release, opDone := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := turn.Finish(ctx, &g, context.Background(), time.Minute, func(context.Context) error {
		<-release
		close(opDone)
		return io.EOF
	})
	assert.NoError(t, err, "a caller whose ctx ended gets nil")
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	assert.ErrorIs(t, turn.Lock(short, never), context.DeadlineExceeded, "op still holds the turn")
	close(release)
	require.NoError(t, turn.Lock(context.Background(), never))
	select {
	case <-opDone:
	default:
		t.Fatal("the turn was free before op finished")
	}

	g.Close()
	assert.ErrorIs(t, turn.Finish(context.Background(), &g, context.Background(), time.Minute,
		func(context.Context) error { t.Error("op ran after Close"); return nil }), shardcast.ErrClosed)
	require.NoError(t, turn.Lock(context.Background(), never), "a refused Finish releases the turn")
}

func TestIsIOError(t *testing.T) {
	assert.False(t, IsIOError(nil))
	assert.False(t, IsIOError(context.Canceled))
	assert.False(t, IsIOError(context.DeadlineExceeded))
	assert.False(t, IsIOError(&resp.ServerError{Msg: "ERR refused"}))
	assert.True(t, IsIOError(io.EOF))
	assert.True(t, IsIOError(errors.New("read: connection reset by peer")))
}

func TestBackoff(t *testing.T) {
	min, max := 50*time.Millisecond, 2*time.Second
	for n, want := range map[int]time.Duration{0: min, 1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 6: max, 50: max} {
		assert.Equal(t, want, Backoff(n, min, max), "attempt %d", n)
	}
}
