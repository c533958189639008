package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
)

// TestProbeGivenUpKeepsSequenceAhead: a probe given up without a verdict
// (its publish failed, or it was lost with its wire) counts as answered,
// so that a late copy of it, arriving after the next probe was sent,
// cannot pass for that next probe and hide a silent path for a round.
func TestProbeGivenUpKeepsSequenceAhead(t *testing.T) {
	c := NewCore(CoreConfig{
		Options: shardcast.Options{Raw: true, Handler: func(shardcast.Message) {}}.WithDefaults(),
		Conn:    shardcast.ConnOptions{}.WithDefaults(),
		Paths:   1,
		Mode:    subconn.Classic,
	})
	defer c.Close(func() {})
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
