package relayout

import (
	"context"
	"sync"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
)

// Gate lets Subscribe and Unsubscribe calls run side by side (Enter) and
// keeps them out while an online re-layout changes which paths a channel
// is wanted on (Lock): a call must not group its channels by one routing
// and add them after the re-layout listed the channels under the next.
// Every wait honours its ctx and ends when the broker closes.
type Gate struct {
	mu      sync.Mutex
	readers int
	writer  bool
	changed chan struct{}
}

func (g *Gate) wait(ctx context.Context, closing <-chan struct{}, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return shardcast.ErrClosed
	}
}

// signal wakes every waiter; the caller holds g.mu.
func (g *Gate) signal() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// waitChan returns the channel the next change closes; the caller holds
// g.mu.
func (g *Gate) waitChan() <-chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// Enter admits a call unless a re-layout step holds the Gate.
func (g *Gate) Enter(ctx context.Context, closing <-chan struct{}) error {
	for {
		g.mu.Lock()
		if !g.writer {
			g.readers++
			g.mu.Unlock()
			return nil
		}
		ch := g.waitChan()
		g.mu.Unlock()
		if err := g.wait(ctx, closing, ch); err != nil {
			return err
		}
	}
}

// Exit ends a call Enter admitted.
func (g *Gate) Exit() {
	g.mu.Lock()
	g.readers--
	g.signal()
	g.mu.Unlock()
}

// Lock waits until no call is in and keeps new ones out until Unlock.
func (g *Gate) Lock(ctx context.Context, closing <-chan struct{}) error {
	for {
		g.mu.Lock()
		if !g.writer {
			g.writer = true
			g.mu.Unlock()
			break
		}
		ch := g.waitChan()
		g.mu.Unlock()
		if err := g.wait(ctx, closing, ch); err != nil {
			return err
		}
	}
	for {
		g.mu.Lock()
		if g.readers == 0 {
			g.mu.Unlock()
			return nil
		}
		ch := g.waitChan()
		g.mu.Unlock()
		if err := g.wait(ctx, closing, ch); err != nil {
			g.Unlock()
			return err
		}
	}
}

// Unlock lets calls in again.
func (g *Gate) Unlock() {
	g.mu.Lock()
	g.writer = false
	g.signal()
	g.mu.Unlock()
}

// Subscribe is a broker's Subscribe under the gate: channels are checked,
// then subscribed on the paths groups puts them on (read inside the gate,
// so that a re-layout step cannot change the routing in between).
func (g *Gate) Subscribe(ctx context.Context, core *engine.Core, channels []string, groups func([]string) []shardcast.Group) error {
	if err := engine.CheckChannels(ctx, core.Closed(), channels); err != nil {
		return err
	}
	if core.Pool == nil {
		return shardcast.ErrNoHandler
	}
	if err := g.Enter(ctx, core.Closing()); err != nil {
		return err
	}
	defer g.Exit()
	return core.SubscribeGroups(ctx, groups(channels))
}

// Unsubscribe is a broker's Unsubscribe under the gate, as Subscribe; a
// broker without a Handler has nothing to unsubscribe.
func (g *Gate) Unsubscribe(ctx context.Context, core *engine.Core, channels []string, groups func([]string) []shardcast.Group) error {
	if err := engine.CheckChannels(ctx, core.Closed(), channels); err != nil {
		return err
	}
	if core.Pool == nil {
		return nil
	}
	if err := g.Enter(ctx, core.Closing()); err != nil {
		return err
	}
	defer g.Exit()
	return core.UnsubscribeGroups(ctx, groups(channels))
}
