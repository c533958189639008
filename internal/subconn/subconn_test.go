package subconn

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects what a connection's hooks saw.
type recorder struct {
	mu   sync.Mutex
	msgs map[string][]string
	lost []string
}

func newRecorder() *recorder { return &recorder{msgs: map[string][]string{}} }

func (r *recorder) hooks() Hooks {
	return Hooks{
		OnMessage: func(ch string, p []byte) { r.mu.Lock(); r.msgs[ch] = append(r.msgs[ch], string(p)); r.mu.Unlock() },
		OnLost:    func(ch string) { r.mu.Lock(); r.lost = append(r.lost, ch); r.mu.Unlock() },
	}
}

func (r *recorder) count(ch string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs[ch])
}

func (r *recorder) lostChannels() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lost...)
}

func newClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestClassicSubscribeDeliverUnsubscribe(t *testing.T) {
	srv := redistest.StartStandalone(t)
	client := newClient(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := newRecorder()
	conn, err := Open(ctx, Dialer{Addr: srv.Addr()}, Classic, rec.hooks())
	require.NoError(t, err)
	defer conn.Close()

	errs := conn.Subscribe(ctx, []string{"a", "b"}, []string{"c"})
	require.Equal(t, []error{nil, nil}, errs)
	n, err := srv.Do(ctx, "PUBSUB", "NUMSUB", "a", "b", "c")
	require.NoError(t, err)
	assert.Equal(t, []any{"a", int64(1), "b", int64(1), "c", int64(1)}, n)

	require.NoError(t, client.Do(ctx, client.B().Publish().Channel("c").Message("hello").Build()).Error())
	require.Eventually(t, func() bool { return rec.count("c") == 1 }, 5*time.Second, 5*time.Millisecond)

	// Our own unsubscribe is confirmed by the server but is not a loss.
	require.Equal(t, []error{nil}, conn.Unsubscribe(ctx, []string{"a", "c"}))
	require.NoError(t, conn.Ping(ctx)) // the confirmations precede the PING reply
	assert.Empty(t, rec.lostChannels())
	n, err = srv.Do(ctx, "PUBSUB", "NUMSUB", "a", "b", "c")
	require.NoError(t, err)
	assert.Equal(t, []any{"a", int64(0), "b", int64(1), "c", int64(0)}, n)
	assert.True(t, conn.Alive())
	assert.NoError(t, conn.Err())
}

func TestDoneWhenServerDies(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := Open(ctx, Dialer{Addr: srv.Addr()}, Classic, Hooks{})
	require.NoError(t, err)
	defer conn.Close()
	require.Equal(t, []error{nil}, conn.Subscribe(ctx, []string{"x"}))

	require.NoError(t, srv.Kill())
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close after the server died")
	}
	assert.False(t, conn.Alive())
	assert.Error(t, conn.Err())
	errs := conn.Subscribe(ctx, []string{"y"})
	require.Len(t, errs, 1)
	assert.Error(t, errs[0], "a dead wire never confirms")
	assert.Error(t, conn.Ping(ctx))
	conn.Close()
	conn.Close() // idempotent
}

func TestOpenFailsOnUnreachableServer(t *testing.T) {
	srv := redistest.StartStandalone(t)
	require.NoError(t, srv.Kill())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := Open(ctx, Dialer{Addr: srv.Addr()}, Classic, Hooks{})
	require.Error(t, err)
	assert.Nil(t, conn)
}

// TestShardedSlotMoveIsReportedAsLost moves a subscribed slot to another
// master: the server's pushed sunsubscribe must reach OnLost, while the
// confirmation of our own SUNSUBSCRIBE must not.
func TestShardedSlotMoveIsReportedAsLost(t *testing.T) {
	c := redistest.StartCluster(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Two keys of different slots in the first half, which redis-cli's
	// split gives to one master.
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("{k%d}.ch", i)
		if crc16.Slot(k) < 8000 && (len(keys) == 0 || crc16.Slot(keys[0]) != crc16.Slot(k)) {
			keys = append(keys, k)
		}
	}
	moved, stays := keys[0], keys[1]
	movedSlot, staysSlot := crc16.Slot(moved), crc16.Slot(stays)
	owner, err := c.MasterOfSlot(ctx, movedSlot)
	require.NoError(t, err)
	other, err := c.MasterOfSlot(ctx, staysSlot)
	require.NoError(t, err)
	require.Equal(t, owner.Addr(), other.Addr(), "both test keys start on one master")
	var target *redistest.Server
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	for _, m := range masters {
		if m.Addr() != owner.Addr() {
			target = m
		}
	}
	require.NotNil(t, target)

	rec := newRecorder()
	conn, err := Open(ctx, Dialer{Addr: owner.Addr()}, Sharded, rec.hooks())
	require.NoError(t, err)
	defer conn.Close()
	// Two single-slot commands on one wire.
	require.Equal(t, []error{nil, nil}, conn.Subscribe(ctx, []string{moved}, []string{stays}))

	require.NoError(t, c.MoveSlot(ctx, movedSlot, target))
	require.Eventually(t, func() bool { return len(rec.lostChannels()) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{moved}, rec.lostChannels())
	assert.True(t, conn.Alive(), "a slot move keeps the wire open")

	require.Equal(t, []error{nil}, conn.Unsubscribe(ctx, []string{stays}))
	require.NoError(t, conn.Ping(ctx))
	assert.Equal(t, []string{moved}, rec.lostChannels(), "our own sunsubscribe is not a loss")

	// SSUBSCRIBE for a slot this node no longer owns is refused with MOVED.
	errs := conn.Subscribe(ctx, []string{moved})
	require.Len(t, errs, 1)
	se, ok := IsServerError(errs[0])
	require.True(t, ok, "want a MOVED reply, got %v", errs[0])
	assert.True(t, se.IsMoved(), se.Msg)
	assert.True(t, conn.Alive())
}
