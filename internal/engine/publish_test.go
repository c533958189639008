package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testRouting is a routing of testRoute: every channel goes to dest, and
// moves when moving is set.
type testRouting struct {
	dest     int
	moving   bool
	inflight atomic.Int64
}

// testRoute records what the Publisher asked of it. swap, when set, runs
// once on the first Dest call, as a re-layout replacing the routing
// between the load and the pin.
type testRoute struct {
	routes   *atomic.Pointer[testRouting]
	swap     func()
	sent     []int
	inflight []int64 // the routing's count when the call was sent
	err      error
}

func (r *testRoute) Dest(rt *testRouting, _ string) (int, *atomic.Int64) {
	if r.swap != nil {
		swap := r.swap
		r.swap = nil
		swap()
	}
	if rt.moving {
		return rt.dest, &rt.inflight
	}
	return rt.dest, nil
}

func (r *testRoute) ProbeDest(string) int { return -1 }

func (r *testRoute) SendTo(_ context.Context, d int, _ string, _ []byte) error {
	r.sent = append(r.sent, d)
	r.inflight = append(r.inflight, r.routes.Load().inflight.Load())
	return r.err
}

func (r *testRoute) QueueTo(ctx context.Context, _ *AsyncCall, d int, channel string, payload []byte) error {
	return r.SendTo(ctx, d, channel, payload)
}

func (r *testRoute) AsyncFailed(_ string, err error) error { return err }

func (r *testRoute) EvalAt(ctx context.Context, d int, channel string, _ *shardcast.Script, _, _ []string) (any, error) {
	return "ok", r.SendTo(ctx, d, channel, nil)
}

func newTestPublisher(t *testing.T, first *testRouting) (*Publisher[testRouting, int], *testRoute, *atomic.Pointer[testRouting]) {
	c := NewCore(CoreConfig{Options: shardcast.Options{}.WithDefaults(), Conn: shardcast.ConnOptions{}.WithDefaults()})
	t.Cleanup(func() { c.Close(func() {}) })
	var routes atomic.Pointer[testRouting]
	routes.Store(first)
	r := &testRoute{routes: &routes}
	var p Publisher[testRouting, int]
	p.Init(c, &routes, r)
	return &p, r, &routes
}

// TestPublisherPins: a moving channel's call counts in its routing's
// in-flight count while it is sent and not after; a call whose routing
// was replaced before the pin goes by the new one; probes go by
// ProbeDest, a channel that stays put counts nothing, and only accepted
// publishes count in Stats.Published.
func TestPublisherPins(t *testing.T) {
	ctx := context.Background()
	old := &testRouting{dest: 1, moving: true}
	p, r, routes := newTestPublisher(t, old)
	next := &testRouting{dest: 2, moving: true}
	r.swap = func() { routes.Store(next) }

	require.NoError(t, p.Publish(ctx, "a", nil))
	assert.Equal(t, []int{2}, r.sent, "routed again under the routing that replaced the one loaded")
	assert.Equal(t, []int64{1}, r.inflight, "pinned while sent")
	assert.Zero(t, old.inflight.Load())
	assert.Zero(t, next.inflight.Load(), "unpinned once answered")

	_, err := p.Eval(ctx, "a", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.inflight[1], "a script pins like a publish")
	assert.Zero(t, next.inflight.Load())

	require.NoError(t, p.Send(ctx, ProbeChannelPrefix+"x", nil))
	assert.Equal(t, -1, r.sent[2], "probes test paths, whatever the layout")

	routes.Store(&testRouting{dest: 3})
	require.NoError(t, p.Publish(ctx, "a", nil))
	assert.Equal(t, []int64{0}, r.inflight[3:], "a channel that stays put pins nothing")
	assert.Equal(t, uint64(2), p.core.Stats().Published, "Send (probes) and Eval do not count")

	r.err = errors.New("refused")
	assert.Equal(t, r.err, p.Publish(ctx, "a", nil))
	assert.Equal(t, uint64(2), p.core.Stats().Published)
}

// TestPublisherAsyncAbandons: a PublishAsync call its route refuses gives
// back its room and its pin at once, so that neither leaks.
func TestPublisherAsyncAbandons(t *testing.T) {
	ctx := context.Background()
	rt := &testRouting{dest: 1, moving: true}
	p, r, _ := newTestPublisher(t, rt)
	r.err = errors.New("refused")
	for range p.core.Options.MaxAsyncPublishes + 1 {
		assert.Equal(t, r.err, p.PublishAsync(ctx, "a", nil, func(error) { t.Error("done of a refused call") }))
	}
	assert.Zero(t, rt.inflight.Load())
	assert.Equal(t, int64(1), r.inflight[0], "pinned while queued")
}
