package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// movingRouter carries its one path on links[carrier]; a test moves it.
type movingRouter struct {
	mu      sync.Mutex
	links   []*Link
	carrier int
}

func (r *movingRouter) PathOf(string) int    { return 0 }
func (r *movingRouter) KeyPrefix(int) string { return "" }
func (r *movingRouter) Describe(int) string  { return "path 0" }
func (r *movingRouter) Links() []*Link       { return r.links }

func (r *movingRouter) Carrier(int) *Link {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.links[r.carrier]
}

func (r *movingRouter) Carriers(ids []int) []*Link {
	out := make([]*Link, len(ids))
	for i, p := range ids {
		out[i] = r.Carrier(p)
	}
	return out
}

func (r *movingRouter) Carried(l *Link) []int {
	if r.Carrier(0) == l {
		return []int{0}
	}
	return nil
}

func (r *movingRouter) moveTo(i int) {
	r.mu.Lock()
	r.carrier = i
	r.mu.Unlock()
}

// TestMovedPathIgnoresItsOldWire: a path moved to another link while the
// old node keeps its subscription (as a demoted master does until it
// learns of the failover, still receiving its shard's messages) takes
// each message once, from its new link, and counts the old link's copy as
// stale. The two links here reach one standalone server, so every
// publish arrives on both wires, as it would from old and new master.
func TestMovedPathIgnoresItsOldWire(t *testing.T) {
	srv := redistest.StartStandalone(t)
	m := newMovingRig(t, srv, subconn.Dialer{Addr: srv.Addr()}, subconn.Dialer{Addr: srv.Addr()})
	c, r := m.c, m.r

	// The move: the path goes to link 1; link 0's wire keeps "ch".
	r.moveTo(1)
	c.InterruptMoved([]Move{{Path: 0, From: srv.Addr(), To: srv.Addr(), Since: time.Now()}},
		func(string, string) error { return errors.New("moved") })
	c.RequestRefresh()
	select {
	case <-m.restored:
	case <-m.ctx.Done():
		t.Fatal("the path was not restored on its new link")
	}
	require.Equal(t, r.links[1].Current(), c.Paths[0].ActiveWire())
	n, err := srv.Do(m.ctx, "PUBSUB", "NUMSUB", "ch")
	require.NoError(t, err)
	require.Equal(t, []any{"ch", int64(2)}, n, "both wires hold the channel, as old and new master would")

	m.publish(t, "after")
	m.publish(t, "marker")
	assert.Equal(t, "after", m.next(t))
	assert.Equal(t, "marker", m.next(t), "the old wire's copy of the message was delivered too")
	assert.Eventually(t, func() bool { return c.Stats().Stale == 2 }, 10*time.Second, time.Millisecond,
		"the old wire's copies of both are counted")
}

// movingRig is a core with one path, carried by links to one standalone
// server with the given dialers, a Handler that passes payloads to got,
// and "ch" subscribed on link 0.
type movingRig struct {
	c           *Core
	r           *movingRouter
	srv         *redistest.Server
	got         chan string
	restored    chan struct{}
	interrupted chan shardcast.Event
	ctx         context.Context
}

func newMovingRig(t *testing.T, srv *redistest.Server, dialers ...subconn.Dialer) *movingRig {
	m := &movingRig{srv: srv, got: make(chan string, 16), restored: make(chan struct{}, 4),
		interrupted: make(chan shardcast.Event, 4), r: &movingRouter{}}
	m.c = NewCore(CoreConfig{
		Options: shardcast.Options{
			Raw:     true,
			Handler: func(msg shardcast.Message) { m.got <- string(msg.Payload) },
			OnEvent: func(ev shardcast.Event) {
				switch ev.Kind {
				case shardcast.EventRestored:
					m.restored <- struct{}{}
				case shardcast.EventInterrupted:
					select {
					case m.interrupted <- ev:
					default:
					}
				}
			},
		}.WithDefaults(),
		Conn:  shardcast.ConnOptions{RecoveryInterval: 10 * time.Millisecond}.WithDefaults(),
		Paths: 1,
		Mode:  subconn.Classic,
	})
	m.c.SetRouter(m.r)
	deliver := func(l *Link) func(string, []byte) {
		return func(key string, payload []byte) { m.c.DeliverFrom(l, 0, key, payload) }
	}
	for i, d := range dialers {
		m.r.links = append(m.r.links, m.c.NewLink(d, i, deliver, nil))
	}
	t.Cleanup(func() {
		m.c.Close(func() {
			for _, l := range m.r.links {
				l.Stop()
			}
		})
	})
	for _, l := range m.r.links {
		l.Start()
	}
	m.c.Maintain(0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	m.ctx = ctx
	require.NoError(t, m.c.Subscribe(ctx, []string{"ch"}))
	m.publish(t, "before")
	require.Equal(t, "before", m.next(t))
	return m
}

func (m *movingRig) publish(t *testing.T, payload string) {
	t.Helper()
	_, err := m.srv.Do(m.ctx, "PUBLISH", "ch", payload)
	require.NoError(t, err)
}

func (m *movingRig) next(t *testing.T) string {
	t.Helper()
	select {
	case p := <-m.got:
		return p
	case <-m.ctx.Done():
		t.Fatal("no message")
		return ""
	}
}

// TestMoveFence: after a failover moves a path to another link, messages
// published no later than the last one the old link delivered are dropped
// as copies until the fence span (the order span) has passed; later ones, a path that never
// moved, and a path whose slot migrated to another shard take everything.
func TestMoveFence(t *testing.T) {
	p := newPath(0)
	a, b := &Link{}, &Link{}
	p.setOwner(a)
	assert.True(t, p.admit(100))
	assert.True(t, p.admit(200))
	assert.True(t, p.admit(150), "no fence without a move: order across publishers is not judged")

	p.failover.Store(true) // a failover move: the old node may still deliver
	p.setOwner(b)
	assert.False(t, p.admit(150), "published before the old link's last message")
	assert.False(t, p.admit(200), "the old link's last message itself")
	assert.True(t, p.admit(201))
	assert.False(t, p.admit(199), "the fence holds for the order span")

	p.fenceUntil.Store(time.Now().Add(-time.Nanosecond).UnixNano())
	assert.True(t, p.admit(150), "after the span nothing is fenced")
	p.setOwner(b)
	assert.True(t, p.admit(120), "re-subscribing on the same link raises no fence")

	fresh := newPath(1)
	fresh.setOwner(a)
	fresh.failover.Store(true)
	fresh.setOwner(b)
	assert.True(t, fresh.admit(10), "a path that delivered nothing has nothing to fence")

	// The old link's reader passed the owner check just before the move
	// and stamped lastAt just after the mover read it: taken raises the
	// fence over that message, so its copy from the new node is dropped.
	racing := newPath(3)
	racing.setOwner(a)
	assert.True(t, racing.admit(100))
	racing.failover.Store(true)
	racing.setOwner(b)                // the fence is set from lastAt = 100
	assert.True(t, racing.admit(300)) // a's message, admitted as if before the move (fence 100)
	racing.taken(a, 300)
	assert.False(t, racing.admit(300), "the copy of the racing message from the new node")
	assert.True(t, racing.admit(301))

	migrated := newPath(2)
	migrated.setOwner(a)
	assert.True(t, migrated.admit(100))
	migrated.setOwner(b) // a slot migrated to another shard: no copies come
	assert.True(t, migrated.admit(50), "a move that is not a failover raises no fence")
}

// TestFailedResubscribeKeepsTheOldOwner: when a resubscribe on the link a
// path is moving to fails while the path is still active on its old link
// (a heal that ran ahead of the move's interruption, and the new node
// refused), the old link keeps delivering the path's messages: they are
// not dropped as stale copies, which would leave the path silently dead.
func TestFailedResubscribeKeepsTheOldOwner(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithArgs("--user", "limited", "on", ">pw", "~*", "&other:*", "+@all"))
	m := newMovingRig(t, srv, subconn.Dialer{Addr: srv.Addr()},
		// The link the path moves to may not subscribe "ch": NOPERM.
		subconn.Dialer{Addr: srv.Addr(), Username: "limited", Password: "pw"})
	c, r := m.c, m.r

	r.moveTo(1) // no interruption: the heal runs ahead of it
	c.RequestRefresh()
	require.Eventually(t, func() bool {
		return r.links[1].resubscribeCommands.Load() > 0 && c.Paths[0].owner.Load() == r.links[0]
	}, 10*time.Second, time.Millisecond, "the refused resubscribe on the new link left the path owned by it")
	require.Equal(t, r.links[0].Current(), c.Paths[0].ActiveWire(), "the path is still active on its old link")
	m.publish(t, "after")
	assert.Equal(t, "after", m.next(t), "the old link's messages are still taken")
	assert.Zero(t, c.Stats().Stale)
}
