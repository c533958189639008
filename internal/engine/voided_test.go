package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
)

// fakeRedis is a minimal RESP2 server for races a real Redis cannot be
// made to hit on demand: each command (an array of bulk strings) goes to
// reply, whose answer is written in one write.
type fakeRedis struct {
	ln    net.Listener
	reply func(conn int, cmd []string) []byte
	mu    sync.Mutex
	conns []net.Conn
}

func startFake(t *testing.T, reply func(conn int, cmd []string) []byte) *fakeRedis {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{ln: ln, reply: reply}
	go func() {
		for n := 0; ; n++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, nc)
			f.mu.Unlock()
			go f.serve(n, nc)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *fakeRedis) serve(n int, nc net.Conn) {
	br := bufio.NewReader(nc)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		cnt, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		cmd := make([]string, cnt)
		for i := range cmd {
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
			s, err := br.ReadString('\n')
			if err != nil {
				return
			}
			cmd[i] = strings.TrimSuffix(s, "\r\n")
		}
		if out := f.reply(n, cmd); len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				return
			}
		}
	}
}

// push3 is a (un)subscribe confirmation or push: kind, channel, count.
func push3(kind, ch string, n int) string {
	return fmt.Sprintf("*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n", len(kind), kind, len(ch), ch, n)
}

// newFakeCore is a one-path core on the classic protocol whose events go
// to the returned func, with one link per fake.
func newFakeCore(t *testing.T, fakes ...*fakeRedis) (*Core, *movingRouter, func() []shardcast.Event) {
	var mu sync.Mutex
	var events []shardcast.Event
	r := &movingRouter{}
	c := NewCore(CoreConfig{
		Options: shardcast.Options{
			Raw: true, Handler: func(shardcast.Message) {},
			OnEvent: func(ev shardcast.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() },
		}.WithDefaults(),
		Conn:  shardcast.ConnOptions{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 20 * time.Millisecond}.WithDefaults(),
		Paths: 1,
		Mode:  subconn.Classic,
	})
	c.SetRouter(r)
	for _, f := range fakes {
		r.links = append(r.links, c.NewLink(subconn.Dialer{Addr: f.ln.Addr().String()}, 0,
			func(l *Link) func(string, []byte) {
				return func(key string, payload []byte) { c.DeliverFrom(l, 0, key, payload) }
			},
			func(l *Link, key string) { c.NoteLost(l, 0, errors.New("slot moved")) }))
	}
	for _, l := range r.links {
		l.Start()
	}
	t.Cleanup(func() {
		c.Close(func() {
			for _, l := range r.links {
				l.Stop()
			}
		})
	})
	return c, r, func() []shardcast.Event {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting: " + what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSubscribeVoidedByPush: the server confirms a path's first channel
// and at once pushes its unsubscribe (the slot moved right after the
// SUBSCRIBE ran). The push interrupts the path before the channel is
// wanted, so that interruption names nothing: Subscribe must not take
// the confirmation. It subscribes again (the fake drops only once) and
// returns with the channel subscribed on a live path.
func TestSubscribeVoidedByPush(t *testing.T) {
	for round := range 10 {
		var dropped atomic.Bool
		f := startFake(t, func(_ int, cmd []string) []byte {
			switch strings.ToUpper(cmd[0]) {
			case "PING":
				return []byte("+PONG\r\n")
			case "SUBSCRIBE":
				if dropped.CompareAndSwap(false, true) {
					return []byte(push3("subscribe", cmd[1], 1) + push3("unsubscribe", cmd[1], 0))
				}
				return []byte(push3("subscribe", cmd[1], 1))
			}
			return []byte("-ERR unknown\r\n")
		})
		c, _, events := newFakeCore(t, f)
		waitUntil(t, "the path to be active", func() bool { return c.Paths[0].ActiveWire() != nil })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, c.Subscribe(ctx, []string{"ch"}), "round %d", round)
		cancel()
		if c.Paths[0].ActiveWire() == nil {
			// Interrupted after Subscribe took the confirmation: then
			// the interruption must name the channel.
			waitUntil(t, "an Interrupted event naming ch", func() bool {
				return slices.ContainsFunc(events(), func(ev shardcast.Event) bool {
					return ev.Kind == shardcast.EventInterrupted && slices.Contains(ev.Channels, "ch")
				})
			})
		}
		assert.Contains(t, c.Paths[0].Wanted(), "ch", "round %d", round)
	}
}

// TestResubscribeOnOldNodeVoidedByMove: link A's reconnect resubscribes
// the path; while that SUBSCRIBE is in flight the slot map moves the path
// to B. A then confirms (it ran the command before it learned of the
// move): the path must not become active on A, nor be reported restored,
// until B holds it.
func TestResubscribeOnOldNodeVoidedByMove(t *testing.T) {
	gate := make(chan struct{})
	inFlight := make(chan struct{}, 1)
	answered := make(chan struct{})
	a := startFake(t, func(conn int, cmd []string) []byte {
		switch strings.ToUpper(cmd[0]) {
		case "PING":
			return []byte("+PONG\r\n")
		case "SUBSCRIBE":
			if conn > 0 { // the reconnect's resubscribe waits for the test
				inFlight <- struct{}{}
				<-gate
				defer close(answered)
			}
			return []byte(push3("subscribe", cmd[1], 1))
		}
		return []byte("-ERR unknown\r\n")
	})
	b := startFake(t, func(_ int, cmd []string) []byte {
		switch strings.ToUpper(cmd[0]) {
		case "PING":
			return []byte("+PONG\r\n")
		case "SUBSCRIBE":
			return []byte(push3("subscribe", cmd[1], 1))
		}
		return []byte("-ERR unknown\r\n")
	})
	c, r, events := newFakeCore(t, a, b)
	la, lb := r.links[0], r.links[1]
	waitUntil(t, "the path to be active on A", func() bool { w := c.Paths[0].ActiveWire(); return w != nil && w == la.Current() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Subscribe(ctx, []string{"ch"}))

	// A drops the connection; the link reconnects and resubscribes.
	a.mu.Lock()
	_ = a.conns[0].Close()
	a.mu.Unlock()
	select {
	case <-inFlight:
	case <-ctx.Done():
		t.Fatal("no resubscribe on A")
	}
	r.moveTo(1)
	c.InterruptMoved([]Move{{Path: 0, From: "A", To: "B", Since: time.Now()}},
		func(string, string) error { return errors.New("moved") })
	close(gate) // A confirms
	<-answered
	time.Sleep(200 * time.Millisecond) // A's confirmation is read and its sync ends
	assert.True(t, c.Paths[0].ActiveWire() == nil, "activated on A, which no longer carries the path")
	assert.False(t, slices.ContainsFunc(events(), func(ev shardcast.Event) bool { return ev.Kind == shardcast.EventRestored }),
		"reported restored before B holds the path: %v", events())

	c.heal()
	waitUntil(t, "the path to be active on B", func() bool { w := lb.Current(); return w != nil && c.Paths[0].ActiveWire() == w })
	waitUntil(t, "a Restored event once B holds it", func() bool {
		return slices.ContainsFunc(events(), func(ev shardcast.Event) bool { return ev.Kind == shardcast.EventRestored })
	})
}
