package measure

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// spin burns CPU for d of wall time.
func spin(d time.Duration) uint64 {
	var x uint64
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 10000 {
			x += uint64(i) * x
		}
	}
	return x
}

func TestCPUSplitCountsByInheritedLabel(t *testing.T) {
	s, err := StartCPUSplit("side")
	require.NoError(t, err)
	_, err = StartCPUSplit("side")
	require.Error(t, err, "a second profile while one runs")

	var wg sync.WaitGroup
	var sink [2]uint64
	for i, side := range []string{"node", "clients"} {
		wg.Add(1)
		// The labelled goroutine only waits: every sample under its label
		// comes from the goroutine it starts, which inherits the label.
		pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) {
			go func() {
				defer wg.Done()
				done := make(chan struct{})
				go func() { sink[i] = spin(400 * time.Millisecond); close(done) }()
				<-done
			}()
		})
	}
	wg.Wait()
	got, err := s.Stop()
	require.NoError(t, err)
	require.Positive(t, got["node"], "samples of the node side: %v", got)
	require.Positive(t, got["clients"], "samples of the clients side: %v", got)
	for k := range got {
		require.Contains(t, []string{"node", "clients", ""}, k)
	}
	_ = sink
}
