package subconn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/resp"
)

// TestSubscribePrefixed: each batch's channels are subscribed on the
// server as its prefix + channel, confirmed, and delivered under that
// name; prefixes that do not pair with the batches send nothing.
func TestSubscribePrefixed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, conn, rec := openRecorded(t, ctx)
	client := newClient(t, srv.Addr())

	errs := conn.SubscribePrefixed(ctx, []string{"x:", "yy:", ""}, [][]string{{"a", "b"}, {"c"}, {"d"}})
	require.Equal(t, []error{nil, nil, nil}, errs)
	n, err := srv.Do(ctx, "PUBSUB", "NUMSUB", "x:a", "x:b", "yy:c", "d", "a")
	require.NoError(t, err)
	assert.Equal(t, []any{"x:a", int64(1), "x:b", int64(1), "yy:c", int64(1), "d", int64(1), "a", int64(0)}, n)
	require.NoError(t, client.Do(ctx, client.B().Publish().Channel("yy:c").Message("hello").Build()).Error())
	require.Eventually(t, func() bool { return rec.count("yy:c") == 1 }, 5*time.Second, 5*time.Millisecond)

	errs = conn.SubscribePrefixed(ctx, []string{"z:"}, [][]string{{"e"}, {"f"}})
	require.Len(t, errs, 2)
	for _, err := range errs {
		assert.ErrorContains(t, err, "1 prefixes for 2 batches")
	}
	n, err = srv.Do(ctx, "PUBSUB", "NUMSUB", "z:e", "e", "f")
	require.NoError(t, err)
	assert.Equal(t, []any{"z:e", int64(0), "e", int64(0), "f", int64(0)}, n)
	assert.True(t, conn.Alive())
}

// TestPrefixedConfirmationMustMatchTheKey: a confirmation is matched with
// the whole key, prefix included: the bare channel, a key of another
// prefix of the same length, or one that only starts with the key is a
// confirmation of something never asked for, which closes the wire.
func TestPrefixedConfirmationMustMatchTheKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, key := range map[string]string{
		"bare channel":   "a",
		"another prefix": "x;a",
		"longer key":     "x:ab",
	} {
		t.Run(name, func(t *testing.T) {
			conn, p := openFake(t, startFake(t), Classic, Hooks{})
			res := make(chan []error, 1)
			go func() { res <- conn.SubscribePrefixed(ctx, []string{"x:"}, [][]string{{"a"}}) }()
			p.expect("SUBSCRIBE", "x:a")
			p.send(confirmation("subscribe", key, 1))
			select {
			case errs := <-res:
				require.Len(t, errs, 1)
				assert.ErrorIs(t, errs[0], resp.ErrProtocol)
			case <-time.After(10 * time.Second):
				t.Fatal("the pending SubscribePrefixed hangs")
			}
			waitDone(t, conn)
		})
	}
	t.Run("the key itself", func(t *testing.T) {
		conn, p := openFake(t, startFake(t), Classic, Hooks{})
		res := make(chan []error, 1)
		go func() { res <- conn.SubscribePrefixed(ctx, []string{"x:"}, [][]string{{"a"}}) }()
		p.expect("SUBSCRIBE", "x:a")
		p.send(confirmation("subscribe", "x:a", 1))
		assert.Equal(t, []error{nil}, <-res)
		assert.True(t, conn.Alive())
	})
}
