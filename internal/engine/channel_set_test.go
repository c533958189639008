package engine

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
)

func TestChannelSet(t *testing.T) {
	s := ChannelSet{}
	assert.Equal(t, []string{"a", "b"}, s.Missing([]string{"a", "b", "a"}))
	s.Add([]string{"a"}, 1)
	assert.Equal(t, []string{"b"}, s.Missing([]string{"a", "b", "b"}))
	s.Add([]string{"a", "b"}, 2) // call 2 succeeded for a (already there) and b
	assert.Empty(t, s.RemoveClaimed([]string{"a"}, 1), "call 1's undo leaves a channel call 2 asked for")
	assert.Equal(t, []string{"a"}, s.RemoveClaimed([]string{"a"}, 2))
	s.Add([]string{"a"}, 3)
	assert.Equal(t, []string{"a"}, s.Remove([]string{"a", "zz", "a"}))
	assert.ElementsMatch(t, []string{"b"}, s.Slice())
}

func TestChecks(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, CheckChannels(ctx, true, []string{"a"}), shardcast.ErrClosed)
	assert.ErrorIs(t, CheckChannels(ctx, false, []string{"a", ""}), shardcast.ErrInvalidChannel)
	assert.ErrorIs(t, CheckChannels(cancelled, false, []string{"a"}), context.Canceled)
	assert.NoError(t, CheckChannels(ctx, false, []string{"a", "{b}"}))

	assert.ErrorIs(t, CheckPublish(ctx, true, "a", nil, 1), shardcast.ErrClosed)
	assert.ErrorIs(t, CheckPublish(ctx, false, "", nil, 1), shardcast.ErrInvalidChannel)
	assert.ErrorIs(t, CheckPublish(ctx, false, "a", []byte("ab"), 1), shardcast.ErrPayloadTooLarge)
	assert.ErrorIs(t, CheckPublish(cancelled, false, "a", nil, 1), context.Canceled)
	assert.NoError(t, CheckPublish(ctx, false, "a", []byte("a"), 1))

	assert.NoError(t, FirstError([]error{nil, nil}))
	assert.ErrorIs(t, FirstError([]error{nil, context.Canceled, shardcast.ErrClosed}), context.Canceled)
}

func TestBackground(t *testing.T) {
	var g Background
	ran := make(chan struct{})
	release := make(chan struct{})
	assert.True(t, g.Go(func() { close(ran); <-release }))
	<-ran
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while work was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-closed
	assert.False(t, g.Go(func() { t.Error("ran after Close") }))
}
