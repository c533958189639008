package subconn

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/redistest"
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
		OnMessage: func(ch string, p []byte) {
			r.mu.Lock()
			ch = strings.Clone(ch) // a view, valid only during the call
			r.msgs[ch] = append(r.msgs[ch], string(p))
			r.mu.Unlock()
		},
		OnLost: func(ch string) { r.mu.Lock(); r.lost = append(r.lost, ch); r.mu.Unlock() },
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

// openRecorded starts a standalone server and opens a classic
// connection to it whose hooks a recorder watches; the connection closes
// when the test ends.
func openRecorded(t *testing.T, ctx context.Context) (*redistest.Server, *Conn, *recorder) {
	t.Helper()
	srv := redistest.StartStandalone(t)
	rec := newRecorder()
	conn, err := Open(ctx, Dialer{Addr: srv.Addr()}, Classic, rec.hooks())
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	return srv, conn, rec
}

func TestClassicSubscribeDeliverUnsubscribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, conn, rec := openRecorded(t, ctx)
	client := newClient(t, srv.Addr())

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

	// Unsubscribing the channel the server already dropped: Redis refuses
	// it with MOVED (the slot is elsewhere now), which answers our call;
	// it is neither a second loss nor a broken wire.
	errs := conn.Unsubscribe(ctx, []string{moved})
	require.Len(t, errs, 1)
	se, ok := resp.IsServerError(errs[0])
	require.True(t, ok, "want a MOVED reply, got %v", errs[0])
	assert.True(t, se.IsMoved(), se.Msg)
	require.NoError(t, conn.Ping(ctx))
	assert.Equal(t, []string{moved}, rec.lostChannels())

	// SSUBSCRIBE for a slot this node no longer owns is refused with MOVED.
	errs = conn.Subscribe(ctx, []string{moved})
	require.Len(t, errs, 1)
	se, ok = resp.IsServerError(errs[0])
	require.True(t, ok, "want a MOVED reply, got %v", errs[0])
	assert.True(t, se.IsMoved(), se.Msg)
	assert.True(t, conn.Alive())
}

// payloadOf is n deterministic bytes that differ with seed, so a payload
// cut short, shifted or swapped with another is caught.
func payloadOf(n, seed int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i*31 + seed*7 + i/251) % 256)
	}
	return string(b)
}

// TestPayloadsAroundTheReadBuffer publishes payloads at and around the
// 64 KiB read buffer (those up to 64 KiB − 2 are handed over as a view of
// it, larger ones through a scratch copy), interleaved with small ones on
// two channels, one with a name longer than the buffer: every message must
// arrive intact, in publish order, under its channel.
func TestPayloadsAroundTheReadBuffer(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	type msg struct{ ch, payload string }
	var got []msg
	conn, err := Open(ctx, Dialer{Addr: srv.Addr()}, Classic, Hooks{OnMessage: func(ch string, p []byte) {
		mu.Lock()
		got = append(got, msg{strings.Clone(ch), string(p)})
		mu.Unlock()
	}})
	require.NoError(t, err)
	defer conn.Close()
	long := "long." + strings.Repeat("n", readBufferSize+10)
	channels := []string{"big", long}
	require.Equal(t, []error{nil}, conn.Subscribe(ctx, channels))

	sizes := []int{0, 1, 65533, 65534, 65535, 65536, 65537, 200 << 10, 3, readBufferSize - 2, 0}
	var want []msg
	for i, n := range sizes {
		want = append(want, msg{channels[i%2], payloadOf(n, i)}, msg{channels[(i+1)%2], fmt.Sprintf("small %d", i)})
	}
	for _, m := range want {
		_, err := srv.Do(ctx, "PUBLISH", m.ch, m.payload)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= len(want) }, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].ch == long, got[i].ch == long, "message %d went to the wrong channel", i)
		require.Equal(t, len(want[i].payload), len(got[i].payload), "message %d", i)
		require.True(t, want[i].payload == got[i].payload, "message %d (%d bytes) arrived altered", i, len(want[i].payload))
	}
	require.NoError(t, conn.Ping(ctx))
}

// subscriberUsers returns the ACL users of srv's clients that hold a
// subscription.
func subscriberUsers(t *testing.T, ctx context.Context, srv *redistest.Server) []string {
	t.Helper()
	clients, err := srv.ClientList(ctx)
	require.NoError(t, err)
	var users []string
	for _, c := range clients {
		if c["sub"] == "1" {
			users = append(users, c["user"])
		}
	}
	return users
}

// TestAuth: an ACL user and its password reach Redis; a wrong password
// fails Open with Redis's refusal, without echoing the password and
// without leaving a goroutine behind.
func TestAuth(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithArgs("--user", "app", "on", ">s3cret", "~*", "&*", "+@all",
		"--user", "open", "on", "nopass", "~*", "&*", "+@all"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("user without password", func(t *testing.T) {
		// An ACL user with nopass takes any password; a username given
		// alone logs in as that user, not as the default one.
		conn, err := Open(ctx, Dialer{Addr: srv.Addr(), Username: "open"}, Classic, Hooks{})
		require.NoError(t, err)
		defer conn.Close()
		require.Equal(t, []error{nil}, conn.Subscribe(ctx, []string{"open"}))
		users := subscriberUsers(t, ctx, srv)
		assert.Equal(t, []string{"open"}, users)
		_, err = Open(ctx, Dialer{Addr: srv.Addr(), Username: "app"}, Classic, Hooks{})
		se, ok := resp.IsServerError(err)
		require.True(t, ok, "a user that has a password is refused without it: %v", err)
		assert.True(t, strings.HasPrefix(se.Msg, "WRONGPASS"), se.Msg)
	})

	t.Run("acl user", func(t *testing.T) {
		rec := newRecorder()
		conn, err := Open(ctx, Dialer{Addr: srv.Addr(), Username: "app", Password: "s3cret"}, Classic, rec.hooks())
		require.NoError(t, err)
		defer conn.Close()
		require.Equal(t, []error{nil}, conn.Subscribe(ctx, []string{"auth"}))
		users := subscriberUsers(t, ctx, srv)
		assert.Equal(t, []string{"app"}, users, "the subscriber is logged in as app")
		_, err = srv.Do(ctx, "PUBLISH", "auth", "ok")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return rec.count("auth") == 1 }, 5*time.Second, 5*time.Millisecond)
	})
	for name, d := range map[string]Dialer{
		"wrong password": {Addr: srv.Addr(), Username: "app", Password: "wrong-pw"},
		"unknown user":   {Addr: srv.Addr(), Username: "nobody", Password: "s3cret"},
	} {
		t.Run(name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			conn, err := Open(ctx, d, Classic, Hooks{})
			require.Error(t, err)
			assert.Nil(t, conn)
			se, ok := resp.IsServerError(err)
			require.True(t, ok, "want Redis's refusal, got %v", err)
			assert.True(t, strings.HasPrefix(se.Msg, "WRONGPASS"), se.Msg)
			assert.NotContains(t, err.Error(), d.Password)
			goleak.VerifyNone(t, before)
		})
	}
	t.Run("requirepass", func(t *testing.T) {
		// Set last: the harness's own connections cannot log in after this.
		_, err := srv.Do(ctx, "CONFIG", "SET", "requirepass", "p4ss")
		require.NoError(t, err)
		conn, err := Open(ctx, Dialer{Addr: srv.Addr(), Password: "p4ss"}, Classic, Hooks{})
		require.NoError(t, err, "a password alone logs in as the default user")
		conn.Close()
		before := goleak.IgnoreCurrent()
		_, err = Open(ctx, Dialer{Addr: srv.Addr()}, Classic, Hooks{})
		se, ok := resp.IsServerError(err)
		require.True(t, ok, "want Redis's refusal of the PING, got %v", err)
		assert.True(t, strings.HasPrefix(se.Msg, "NOAUTH"), se.Msg)
		goleak.VerifyNone(t, before)
	})
}

// TestRefusedBatchAmongPipelined: when Redis refuses one of several
// pipelined subscribe commands, the refusal answers that command's batch
// and the batches around it succeed, on a wire that stays usable.
func TestRefusedBatchAmongPipelined(t *testing.T) {
	t.Run("acl", func(t *testing.T) {
		srv := redistest.StartStandalone(t, redistest.WithArgs("--user", "app", "on", ">pw", "~*", "&ok:*", "+@all"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rec := newRecorder()
		conn, err := Open(ctx, Dialer{Addr: srv.Addr(), Username: "app", Password: "pw"}, Classic, rec.hooks())
		require.NoError(t, err)
		defer conn.Close()

		errs := conn.Subscribe(ctx, []string{"ok:1"}, []string{"ok:2", "forbidden"}, []string{"ok:3", "ok:4"})
		require.Len(t, errs, 3)
		assert.NoError(t, errs[0])
		se, ok := resp.IsServerError(errs[1])
		require.True(t, ok, "want NOPERM, got %v", errs[1])
		assert.True(t, strings.HasPrefix(se.Msg, "NOPERM"), se.Msg)
		assert.NoError(t, errs[2])
		n, err := srv.Do(ctx, "PUBSUB", "NUMSUB", "ok:1", "ok:2", "forbidden", "ok:4")
		require.NoError(t, err)
		assert.Equal(t, []any{"ok:1", int64(1), "ok:2", int64(0), "forbidden", int64(0), "ok:4", int64(1)}, n)
		_, err = srv.Do(ctx, "PUBLISH", "ok:4", "after")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return rec.count("ok:4") == 1 }, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, conn.Ping(ctx))
	})
	t.Run("crossslot", func(t *testing.T) {
		c := redistest.StartCluster(t, 1, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		masters, err := c.Masters(ctx)
		require.NoError(t, err)
		master := masters[0]
		require.NotEqual(t, crc16.Slot("{a}.x"), crc16.Slot("{b}.x"))
		rec := newRecorder()
		conn, err := Open(ctx, Dialer{Addr: master.Addr()}, Sharded, rec.hooks())
		require.NoError(t, err)
		defer conn.Close()

		errs := conn.Subscribe(ctx, []string{"{t}.1", "{t}.2"}, []string{"{a}.x", "{b}.x"}, []string{"{u}.1"})
		require.Len(t, errs, 3)
		assert.NoError(t, errs[0])
		se, ok := resp.IsServerError(errs[1])
		require.True(t, ok, "want CROSSSLOT, got %v", errs[1])
		assert.True(t, strings.HasPrefix(se.Msg, "CROSSSLOT"), se.Msg)
		assert.False(t, se.IsMoved())
		assert.NoError(t, errs[2])
		for _, ch := range []string{"{t}.2", "{u}.1"} {
			_, err := master.Do(ctx, "SPUBLISH", ch, "m")
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return rec.count("{t}.2") == 1 && rec.count("{u}.1") == 1 }, 5*time.Second, 5*time.Millisecond)
		n, err := master.Do(ctx, "PUBSUB", "SHARDNUMSUB", "{a}.x", "{b}.x")
		require.NoError(t, err)
		assert.Equal(t, []any{"{a}.x", int64(0), "{b}.x", int64(0)}, n)
		require.NoError(t, conn.Ping(ctx))
		assert.Empty(t, rec.lostChannels())
	})
}

// TestDuplicateChannels: Redis confirms every argument of a subscribe
// command, duplicates included, and the connection counts them all before
// the next reply.
func TestDuplicateChannels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, conn, rec := openRecorded(t, ctx)

	require.Equal(t, []error{nil, nil}, conn.Subscribe(ctx, []string{"d", "d", "e", "d"}, []string{"e"}))
	require.NoError(t, conn.Ping(ctx))
	_, err := srv.Do(ctx, "PUBLISH", "d", "once")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rec.count("d") == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, []error{nil, nil}, conn.Unsubscribe(ctx, []string{"d", "d"}, []string{"never", "e", "e"}))
	require.NoError(t, conn.Ping(ctx))
	assert.Empty(t, rec.lostChannels())
	n, err := srv.Do(ctx, "PUBSUB", "NUMSUB", "d", "e")
	require.NoError(t, err)
	assert.Equal(t, []any{"d", int64(0), "e", int64(0)}, n)
	assert.True(t, conn.Alive())
}

// TestContextEndsWhileServerFrozen: against a SIGSTOPped server, Subscribe
// and Ping return ctx's error; the wire stays open, and once the server
// thaws its late replies answer the abandoned calls, so later commands are
// matched correctly.
func TestContextEndsWhileServerFrozen(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := newRecorder()
	conn, err := Open(ctx, Dialer{Addr: srv.Addr()}, Classic, rec.hooks())
	require.NoError(t, err)
	defer conn.Close()
	require.Equal(t, []error{nil}, conn.Subscribe(ctx, []string{"before"}))

	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	errs := conn.Subscribe(short, []string{"during.1", "during.2"}, []string{"during.3"})
	cancelShort()
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	short, cancelShort = context.WithTimeout(ctx, 100*time.Millisecond)
	require.ErrorIs(t, conn.Ping(short), context.DeadlineExceeded)
	cancelShort()
	assert.True(t, conn.Alive(), "a silent server does not close the wire")

	require.NoError(t, srv.Resume())
	require.NoError(t, conn.Ping(ctx))
	require.Equal(t, []error{nil}, conn.Subscribe(ctx, []string{"after"}))
	for _, ch := range []string{"before", "during.3", "after"} {
		_, err := srv.Do(ctx, "PUBLISH", ch, "m")
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return rec.count("before") == 1 && rec.count("during.3") == 1 && rec.count("after") == 1
	}, 5*time.Second, 5*time.Millisecond, "Redis executed the abandoned subscribe when it thawed")
	assert.True(t, conn.Alive())
	assert.NoError(t, conn.Err())
}
