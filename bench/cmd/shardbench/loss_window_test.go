package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

// stallingAsync is a lossless in-memory engine: PublishAsync delivers the
// message at once, and acknowledges it at once too, except that acks are
// held until releaseAt (a Redis that answers late for a while) and then
// all given together.
type stallingAsync struct {
	recv      engines.Recv
	mu        sync.Mutex
	releaseAt time.Time
	held      []func(error)
}

func (e *stallingAsync) Publish(ctx context.Context, ch string, p []byte) error {
	e.recv(ch, p, engines.Stamped(p))
	return nil
}

func (e *stallingAsync) PublishAsync(ctx context.Context, ch string, p []byte, done func(error)) error {
	e.recv(ch, p, engines.Stamped(p))
	e.mu.Lock()
	if !e.releaseAt.IsZero() && time.Now().Before(e.releaseAt) {
		e.held = append(e.held, done)
		e.mu.Unlock()
		return nil
	}
	e.mu.Unlock()
	done(nil)
	return nil
}

func (e *stallingAsync) Subscribe(context.Context, []string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Publishing starts when Subscribe returns: hold acks through the
	// warm-up and the first half of the measured window.
	e.releaseAt = time.Now().Add(cfg.warmup + cfg.duration/2)
	time.AfterFunc(time.Until(e.releaseAt), func() {
		e.mu.Lock()
		held := e.held
		e.held = nil
		e.mu.Unlock()
		for _, d := range held {
			d(nil)
		}
	})
	return nil
}

func (e *stallingAsync) Close() error { return nil }

// TestLosslessEngineShowsNoLoss: an engine that delivers every message
// must show published == delivered, i.e. a loss of 0, whatever the timing
// of its acknowledgements.
func TestLosslessEngineShowsNoLoss(t *testing.T) {
	saved := cfg
	defer func() { cfg = saved }()
	cfg.channels, cfg.payload = 100, 64
	cfg.warmup, cfg.duration = 200*time.Millisecond, 600*time.Millisecond
	k := engines.Kind{Name: "stalling-async", New: func(_ engines.Target, _ engines.Tuning, r engines.Recv) (engines.Engine, error) {
		return &stallingAsync{recv: r}, nil
	}}
	// No Redis: INFO against a closed port reads as 0.
	r := throughputRun(context.Background(), k, engines.Target{}, []string{"127.0.0.1:1"}, 4, reference())
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	if r.Published != r.Delivered {
		t.Errorf("lossless engine: published %d, delivered %d; loss column shows %q", r.Published, r.Delivered, tpRow(r, 1)[10])
	}
}
