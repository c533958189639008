package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/require"
)

// TestProbeGivenUpKeepsSequenceAhead: a probe given up without a verdict
// (its publish failed, or it was lost with its wire) counts as answered,
// so that a late copy of it, arriving after the next probe was sent,
// cannot pass for that next probe and hide a silent path for a round.
func TestProbeGivenUpKeepsSequenceAhead(t *testing.T) {
	c := onePathCore(t)
	refused := func(context.Context, string, []byte) error { return errors.New("refused") }
	for _, giveUp := range []struct {
		name string
		do   func(pr *probeState, seq uint64)
	}{
		{"publish failed", func(pr *probeState, seq uint64) { c.sendProbe(refused, pr, seq, probeNow()) }},
		{"forgotten", func(pr *probeState, _ uint64) { pr.forget() }},
	} {
		t.Run(giveUp.name, func(t *testing.T) {
			pr := &probeState{channel: "probe"}
			first := pr.sent.Add(1)
			giveUp.do(pr, first)
			next := pr.sent.Add(1)
			pr.settle(first) // a late copy of the first arrives
			assert.Greater(t, pr.sent.Load(), pr.got.Load(), "the next probe (%d) is still awaited", next)
		})
	}
}

// TestSilentVerdictOnTheJudgedWire: a probe verdict holds only for the
// paths still active on the wire it judged. A path that moved to another
// wire meanwhile is left active, and with no path left to judge the node
// is neither reported nor avoided; on the judged wire the path is
// interrupted, reported with ErrSilentPath and its node avoided.
func TestSilentVerdictOnTheJudgedWire(t *testing.T) {
	srv := redistest.StartStandalone(t)
	open := func() *subconn.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w, err := subconn.Open(ctx, subconn.Dialer{Addr: srv.Addr()}, subconn.Classic, subconn.Hooks{})
		require.NoError(t, err)
		t.Cleanup(w.Close)
		return w
	}
	judged, moved := open(), open()
	var mu sync.Mutex
	var troubled []string
	var events []shardcast.Event
	c := NewCore(CoreConfig{
		Options: shardcast.Options{Raw: true, Handler: func(shardcast.Message) {}, OnEvent: func(ev shardcast.Event) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}}.WithDefaults(),
		Conn:  shardcast.ConnOptions{}.WithDefaults(),
		Paths: 1,
		Mode:  subconn.Classic,
		Trouble: func(addr string) {
			mu.Lock()
			troubled = append(troubled, addr)
			mu.Unlock()
		},
	})
	defer c.Close(func() {})
	link := &Link{Addr: "node:1", wire: judged}
	c.SetRouter(&fanRouter{link: link})
	p := c.Paths[0]
	p.probe = &probeState{channel: "probe"}
	p.add([]string{"p0"}, 1)
	_, ok := p.activateIf(moved, p.lostSeq(), false)
	require.True(t, ok)

	c.silent(probeGroup{wire: judged, relay: link, paths: []*Path{p}})
	assert.Equal(t, moved, p.ActiveWire(), "a path on another wire is not judged")
	mu.Lock()
	assert.Empty(t, troubled, "no path judged: the node is not avoided")
	mu.Unlock()

	_, ok = p.activateIf(judged, p.lostSeq(), false)
	require.True(t, ok)
	c.silent(probeGroup{wire: judged, relay: link, paths: []*Path{p}})
	assert.Nil(t, p.ActiveWire(), "the path on the judged wire is interrupted")
	assert.True(t, p.inSpell())
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 1 && events[0].Kind == shardcast.EventInterrupted && errors.Is(events[0].Err, shardcast.ErrSilentPath)
	}, 5*time.Second, 10*time.Millisecond, "one Interrupted with ErrSilentPath")
	mu.Lock()
	assert.Equal(t, []string{"node:1"}, troubled, "its node avoided")
	mu.Unlock()
}
