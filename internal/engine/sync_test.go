package engine

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAwaitPass checks the maintenance loop's wait: a refresh polls at once,
// a publish-prompted poll (Kick) waits until RecoveryInterval after
// the previous poll but never holds up a refresh, kicks do not pile up,
// and Close ends the wait.
func TestAwaitPass(t *testing.T) {
	newIdle := func(recovery time.Duration) *Core {
		return NewCore(CoreConfig{
			Options: shardcast.Options{}.WithDefaults(),
			Conn:    shardcast.ConnOptions{RecoveryInterval: recovery}.WithDefaults(),
		})
	}
	await := func(b *Core, polled time.Time) <-chan bool {
		out := make(chan bool, 1)
		go func() { out <- b.awaitPass(time.Hour, polled) }()
		return out
	}
	returned := func(t *testing.T, ch <-chan bool) bool {
		t.Helper()
		select {
		case ok := <-ch:
			return ok
		case <-time.After(20 * time.Second):
			t.Fatal("awaitPass did not return")
			return false
		}
	}

	t.Run("refresh polls at once", func(t *testing.T) {
		b := newIdle(time.Hour)
		b.RequestRefresh()
		assert.True(t, returned(t, await(b, time.Now())))
	})
	t.Run("kick long after the last poll polls at once", func(t *testing.T) {
		b := newIdle(time.Hour)
		b.Kick()
		assert.True(t, returned(t, await(b, time.Now().Add(-2*time.Hour))))
	})
	t.Run("kicks coalesce", func(t *testing.T) {
		b := newIdle(time.Hour)
		for range 100 {
			b.Kick()
		}
		assert.Len(t, b.kick, 1)
	})
	t.Run("a spaced kick yields to a refresh", func(t *testing.T) {
		b := newIdle(time.Hour)
		b.Kick()
		out := await(b, time.Now())
		requireSpacing(t, b, out)
		b.RequestRefresh()
		assert.True(t, returned(t, out), "a refresh ends the spacing")
	})
	t.Run("close ends the spacing", func(t *testing.T) {
		b := newIdle(time.Hour)
		b.Kick()
		out := await(b, time.Now())
		requireSpacing(t, b, out)
		close(b.closing)
		assert.False(t, returned(t, out))
	})
	t.Run("a spaced kick polls after RecoveryInterval", func(t *testing.T) {
		b := newIdle(10 * time.Millisecond)
		b.Kick()
		assert.True(t, returned(t, await(b, time.Now())))
	})
}

// requireSpacing waits until the awaitPass reporting on out has taken the
// kick and holds in its spacing wait (only a refresh or Close can end it
// before RecoveryInterval), and fails if it polled at once instead.
func requireSpacing(t *testing.T, b *Core, out <-chan bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(out) > 0 || (len(b.kick) == 0 && parkedIn("engine.(*Core).awaitPass("))
	}, 20*time.Second, time.Millisecond, "awaitPass neither passed nor waited")
	require.Empty(t, out, "a kick right after a poll polled again at once")
}

// parkedIn reports whether some goroutine is blocked in a select whose
// top frame is fn.
func parkedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, rest, _ := strings.Cut(g, "\n")
		top, _, _ := strings.Cut(rest, "\n")
		if strings.Contains(header, "[select") && strings.Contains(top, fn) {
			return true
		}
	}
	return false
}

// fanRouter carries paths p0 … p(n-1), channel "p<i>" on path i, all on
// one link.
type fanRouter struct{ link *Link }

func (r *fanRouter) PathOf(ch string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(ch, "p"))
	return i
}
func (r *fanRouter) KeyPrefix(int) string { return "" }
func (r *fanRouter) Carrier(int) *Link    { return r.link }
func (r *fanRouter) Carried(*Link) []int  { return nil }
func (r *fanRouter) Carriers(ids []int) []*Link {
	out := make([]*Link, len(ids))
	for i := range out {
		out[i] = r.link
	}
	return out
}
func (r *fanRouter) Links() []*Link        { return []*Link{r.link} }
func (r *fanRouter) Describe(p int) string { return "path " + strconv.Itoa(p) }

// TestSyncGivesUpOnAFrozenNode: CommandTimeout bounds each command of a
// resubscribe, and the first command that times out ends the whole sync:
// the node stopped answering, so the groups not yet sent are not sent to
// wait out the same timeout one round of workers after another (64 paths
// over 16 workers would hold the link four timeouts long, unwatched).
// SubscribeBatch 1 keeps each path's command a call of its own: packed,
// all 64 would go out in one write and time out together.
func TestSyncGivesUpOnAFrozenNode(t *testing.T) {
	const paths, workers = 64, 16
	srv := redistest.StartStandalone(t)
	c := NewCore(CoreConfig{
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, SubscribeBatch: 1}.WithDefaults(),
		Conn:    shardcast.ConnOptions{CommandTimeout: 200 * time.Millisecond}.WithDefaults(),
		Paths:   paths,
		Mode:    subconn.Classic,
	})
	r := &fanRouter{}
	c.SetRouter(r)
	r.link = c.NewLink(subconn.Dialer{Addr: srv.Addr()}, 0, func(*Link) func(string, []byte) { return func(string, []byte) {} }, nil)
	r.link.Start()
	t.Cleanup(func() { c.Close(r.link.Stop) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ids := make([]int, paths)
	chans := make([]string, paths)
	for i := range ids {
		ids[i], chans[i] = i, "p"+strconv.Itoa(i)
	}
	require.NoError(t, c.Subscribe(ctx, chans))

	// A second wire the paths are not active on, then the node freezes.
	wire, err := subconn.Open(ctx, subconn.Dialer{Addr: srv.Addr()}, subconn.Classic, subconn.Hooks{})
	require.NoError(t, err)
	defer wire.Close()
	require.NoError(t, srv.Pause())
	c.Sync(r.link, wire, ids)
	require.NoError(t, srv.Resume())
	sent := r.link.resubscribeCommands.Load()
	assert.LessOrEqual(t, sent, uint64(workers), "commands sent to a frozen node")
	for _, p := range c.Paths {
		assert.False(t, p.ActiveWire() == wire, "path %d active on the frozen wire", p.ID)
	}
}
