package sharded

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/require"
)

func TestSmoke(t *testing.T) {
	s1 := redistest.StartStandalone(t)
	s2 := redistest.StartStandalone(t)
	var got atomic.Int64
	sub, err := New(Config{Addrs: []string{s1.Addr(), s2.Addr()}, Options: shardcast.Options{Handler: func(m shardcast.Message) { got.Add(1) }}})
	require.NoError(t, err)
	defer sub.Close()
	pub, err := New(Config{Addrs: []string{s1.Addr(), s2.Addr()}})
	require.NoError(t, err)
	defer pub.Close()
	ctx := context.Background()
	var chans []string
	for i := range 1000 {
		chans = append(chans, fmt.Sprint("c", i))
	}
	require.NoError(t, sub.Subscribe(ctx, chans...))
	for _, c := range chans {
		require.NoError(t, pub.Publish(ctx, c, []byte("x")))
	}
	require.Eventually(t, func() bool { return got.Load() == 1000 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, s1.Kill())
	require.NoError(t, s1.Restart(ctx))
	require.Eventually(t, func() bool {
		return pub.Publish(ctx, chans[0], []byte("x")) == nil && sub.Stats().Reconnects > 0
	}, 10*time.Second, 50*time.Millisecond)
	got.Store(0)
	for _, c := range chans {
		require.NoError(t, pub.Publish(ctx, c, []byte("x")))
	}
	require.Eventually(t, func() bool { return got.Load() == 1000 }, 5*time.Second, 10*time.Millisecond)
}
