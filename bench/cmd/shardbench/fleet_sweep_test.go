package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProbeRoundCountsEachProbeOnceFromItsStart: a message published
// before the round began proves nothing (the warm-up's, arriving after
// the kill); each probe counts once however often it delivers; the round
// records when its last probe delivered, and only then.
func TestProbeRoundCountsEachProbeOnceFromItsStart(t *testing.T) {
	start := time.Now()
	r := newProbeRound([]map[string]int{{"a": 0, "b": 1}, {"c": 0}}, start)
	assert.EqualValues(t, 3, r.remaining.Load())

	r.deliver(0, 0, start.Add(-time.Millisecond))
	assert.EqualValues(t, 3, r.remaining.Load(), "a message from before the round counted")
	r.deliver(0, 0, start)
	r.deliver(0, 0, start.Add(time.Millisecond))
	assert.EqualValues(t, 2, r.remaining.Load(), "a probe counted twice")
	r.deliver(1, 0, start)
	assert.Zero(t, r.last.Load(), "last set before every probe delivered")
	r.deliver(0, 1, start)
	assert.Zero(t, r.remaining.Load())
	assert.GreaterOrEqual(t, r.last.Load(), start.UnixNano(), "the last delivery's time")
}

// loopEngine delivers what it publishes straight to its handler, except
// on the channels in mute: a broker whose subscription there is gone.
type loopEngine struct {
	recv func(ch string, sentAt time.Time)
	mute map[string]bool
}

func (e loopEngine) Publish(_ context.Context, ch string, payload []byte) error {
	if !e.mute[ch] {
		e.recv(ch, engines.Stamped(payload))
	}
	return nil
}

func (loopEngine) Subscribe(context.Context, []string) error { return nil }
func (loopEngine) Close() error                              { return nil }

// TestWarmUpFailsOnAFleetThatDoesNotDeliver: the warm-up ends once every
// probe delivered, and fails, naming how many never did, when a broker's
// probe stays silent (the storm would then measure nothing).
func TestWarmUpFailsOnAFleetThatDoesNotDeliver(t *testing.T) {
	probes := []map[string]int{{"a": 0, "b": 1}, {"c": 0, "d": 1}}
	fleet := func(mute map[string]bool) ([]engines.Engine, *atomic.Pointer[probeRound]) {
		var round atomic.Pointer[probeRound]
		engs := make([]engines.Engine, len(probes))
		for b := range probes {
			engs[b] = loopEngine{mute: mute, recv: func(ch string, sentAt time.Time) {
				if r := round.Load(); r != nil {
					r.deliver(b, probes[b][ch], sentAt)
				}
			}}
		}
		return engs, &round
	}
	engs, round := fleet(nil)
	require.NoError(t, warmUp(context.Background(), engs, probes, round, 10*time.Second))
	assert.Zero(t, round.Load().remaining.Load())

	engs, round = fleet(map[string]bool{"d": true})
	err := warmUp(context.Background(), engs, probes, round, 100*time.Millisecond)
	require.Error(t, err)
	assert.Equal(t, "1 of 4 probes never delivered before the kill", err.Error())
}
