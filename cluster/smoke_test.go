package cluster

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
	c := redistest.StartCluster(t, 3, 1)
	var got atomic.Int64
	sub, err := New(Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: func(m shardcast.Message) { got.Add(1) }}})
	require.NoError(t, err)
	defer sub.Close()
	pub, err := New(Config{Addrs: c.Seeds()})
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var chans []string
	for i := range 1000 {
		chans = append(chans, fmt.Sprint("c", i))
	}
	require.NoError(t, sub.Subscribe(ctx, chans...))
	for _, ch := range chans {
		require.NoError(t, pub.Publish(ctx, ch, []byte("x")))
	}
	require.Eventually(t, func() bool { return got.Load() == 1000 }, 5*time.Second, 10*time.Millisecond)
	t.Log(sub.Masters())
}
