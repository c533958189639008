package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProbeRestoresGather: paths restored by probes are gathered by node
// with the earliest spell start, the first of a batch kicks runProbes once,
// and take starts a new batch.
func TestProbeRestoresGather(t *testing.T) {
	r := probeRestores{kick: make(chan struct{}, 1)}
	t0 := time.Now()
	p1, p2, p3 := newPath(1), newPath(2), newPath(3)
	r.add("a:1", p1, t0)
	r.add("a:1", p2, t0.Add(-time.Second))
	r.add("b:1", p3, t0)
	require.Len(t, r.kick, 1, "one kick per batch")
	<-r.kick
	got := r.take()
	require.Len(t, got, 2)
	assert.Equal(t, []*Path{p1, p2}, got["a:1"].paths)
	assert.Equal(t, t0.Add(-time.Second), got["a:1"].since, "the earliest start")
	assert.Equal(t, []*Path{p3}, got["b:1"].paths)
	assert.Empty(t, r.take())
	r.add("a:1", p1, t0)
	assert.Len(t, r.kick, 1, "a new batch kicks again")
}
